"""Issue 38: exports of crafted labels are data, not markup, formulas or bad JSON.

A Markdown export is rendered (GitHub, an editor's preview): a model label
``<img src=x onerror=...>`` must be shown, not run. A CSV export is opened in a
spreadsheet: a label ``=HYPERLINK(...)`` must not become a formula. A JSON export is
read by ``jq`` or a browser: ``NaN`` and ``Infinity`` are not JSON. The campaign is a
real ``dltop run`` of ``tests/programs/steps.py`` (about a second); the non-finite
values are what a hand-edited or foreign database holds (SQLite stores ``inf``).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.results.render import FORMULA_NOTE, NOT_FINITE, render
from dltop.results.table import Cell, Column, Layout, Role, Row, Table, key_cell
from dltop.textsafe import formula_safe

# One worker crafts the database (a real engine run): under `make test`'s --dist loadgroup
# the module fixture would otherwise run once on each worker.
pytestmark = pytest.mark.xdist_group("export_injection")

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
FORMULAS = ('=HYPERLINK("http://evil","x")', "@SUM(A1:A2)", "+1+cmd|' /C calc'!A0",
            "-2+3", "=1+2")
HTML = "<img src=x onerror=alert(1)>"
LABELS = (*FORMULAS, HTML, "plain-label")


def dltop(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=180, env={**os.environ, "DLTOP_DB": str(db)})


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity``."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def crafted_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("crafted")
    prof = tmp / "p.toml"
    prof.write_text(
        f"name = {json.dumps('crafted ' + HTML, ensure_ascii=False)}\n"
        "[defaults]\niterations = 2\nwarmup = 1\n[[matrix]]\nframeworks = [\"command\"]\n"
        f"models = {json.dumps(LABELS, ensure_ascii=False)}\nbatch_sizes = [8]\n"
        'devices = ["cpu:1"]\n'
        f"command = {json.dumps([sys.executable, str(STEPS), '{total}', '0.01'])}\n")
    res = dltop(tmp / "d.db", "run", "--headless", str(prof))
    assert res.returncode == 0, res.stdout + res.stderr
    return tmp / "d.db"


@pytest.mark.slow
def test_markdown_export_shows_html_as_text(crafted_db: Path) -> None:
    res = dltop(crafted_db, "export", "--format", "md")
    assert res.returncode == 0, res.stderr
    assert "<img" not in res.stdout
    assert "&lt;img src=x onerror=alert(1)>" in res.stdout
    assert res.stdout.splitlines()[0].startswith("Campaign 1 `crafted &lt;img")
    summary = dltop(crafted_db, "export", "--table", "summary", "--format", "md")
    assert summary.returncode == 0 and "<img" not in summary.stdout


@pytest.mark.slow
def test_csv_export_neutralises_formulas_and_says_so(crafted_db: Path) -> None:
    for table in ("pivot", "summary"):
        res = dltop(crafted_db, "export", "--table", table, "--format", "csv")
        assert res.returncode == 0, res.stderr
        comments = [ln for ln in res.stdout.splitlines() if ln.startswith("#")]
        assert f"# {FORMULA_NOTE}" in comments
        rows = list(csv.DictReader(ln for ln in res.stdout.splitlines()
                                   if not ln.startswith("#")))
        models = {r["model"] for r in rows}
        assert models == {"'" + f for f in FORMULAS} | {HTML, "plain-label"}, models
        # the numbers stay numbers: a value column reads as a float in every row
        value = "cpu:1" if table == "pivot" else "median s"
        assert all(float(r[value]) > 0 for r in rows)
        # (a pivot cell's status also gives its n: "ok; n 1/1")
        assert all(r[value + " status"].split(";")[0] == "ok" for r in rows), rows
    runs = dltop(crafted_db, "runs", "--csv")
    assert runs.returncode == 0, runs.stderr
    assert {r["model"] for r in csv.DictReader(runs.stdout.splitlines())} == \
        {"'" + f for f in FORMULAS} | {HTML, "plain-label"}


@pytest.mark.slow
def test_json_exports_have_null_and_the_reason_for_infinity(crafted_db: Path,
                                                              tmp_path: Path) -> None:
    db = tmp_path / "inf.db"
    shutil.copy(crafted_db, db)
    with sqlite3.connect(db) as conn:  # SQLite keeps inf (it turns NaN into NULL)
        conn.execute("update runs set median_s = 9e999, mean_s = 9e999, cv = 9e999 "
                     "where id = 1")
        conn.execute("update iterations set seconds = -9e999 where run_id = 2")
    pivot = strict_json(dltop(db, "export", "--format", "json").stdout)
    cells = [c for row in pivot["rows"] for c in row["cells"].values()]
    inf = [c for c in cells if c["value"] is None]
    assert len(inf) == 1 and inf[0]["label"] == f"{NOT_FINITE} (inf)", inf
    summary = strict_json(dltop(db, "export", "--table", "summary", "--format",
                                "json").stdout)
    first = next(r for r in summary["rows"] if r["model"] == LABELS[0])
    assert first["time"] is None and first["reasons"]["time"] == f"{NOT_FINITE} (inf)"
    for table in ("scaling",):
        res = dltop(db, "export", "--table", table, "--format", "json")
        assert res.returncode == 0, res.stderr
        strict_json(res.stdout)
    runs = dltop(db, "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    by_id = {r["run_id"]: r for r in strict_json(runs.stdout)}
    assert by_id[1]["median_s"] is None and by_id[1]["cv"] is None
    csv_runs = list(csv.DictReader(dltop(db, "runs", "--csv").stdout.splitlines()))
    assert next(r for r in csv_runs if r["run_id"] == "1")["median_s"] == ""
    # CSV: the value column stays numeric (empty), the status says why
    rows = list(csv.DictReader(ln for ln in dltop(db, "export", "--format", "csv")
                               .stdout.splitlines() if not ln.startswith("#")))
    row = next(r for r in rows if r["model"] == "'" + LABELS[0])
    assert row["cpu:1"] == "" and row["cpu:1 status"] == f"{NOT_FINITE} (inf)"


def _table(*rows: tuple[Cell, Cell], layout: Layout = Layout.FLAT,
           meta: dict[str, Any] | None = None) -> Table:
    return Table(title="t", columns=(Column("model", "model", Role.KEY),
                                     Column("v", "v", Role.VALUE, "s")),
                 rows=tuple(Row(r) for r in rows), layout=layout, meta=meta or {})


def test_negative_numbers_stay_numbers_and_no_note_without_a_formula() -> None:
    table = _table((key_cell("a"), Cell("-1.5", -1.5, "ok")),
                   (key_cell("-"), Cell("-2e-3", -2e-3, "ok")),
                   (key_cell("-0.25"), Cell("n/a", None, "unsupported")))
    text = render(table, "csv")
    assert FORMULA_NOTE not in text
    rows = list(csv.reader(ln for ln in text.splitlines() if not ln.startswith("#")))
    assert rows[1:] == [["a", "-1.5", "ok"], ["-", "-0.002", "ok"], ["-0.25", "", "n/a"]]
    assert [formula_safe(t) for t in ("-1", "+2.5", "-1e-3", ".5", "-", "a=b")] == \
        ["-1", "+2.5", "-1e-3", ".5", "-", "a=b"]
    assert [formula_safe(t) for t in ("-1+1", "=1", "@x", "+x", "\t=1", "\r=1", "\uff1d1")] \
        == ["'-1+1", "'=1", "'@x", "'+x", "'\t=1", "'\r=1", "'\uff1d1"]


def test_json_never_holds_nan_or_infinity() -> None:
    nan, inf = float("nan"), float("inf")
    flat = _table((key_cell("a"), Cell("nan", nan, "ok", {"spread_s": inf})),
                  (key_cell("b"), Cell("1.0", 1.0, "ok")),
                  meta={"odd": [nan, {"deep": -inf}]})
    doc = strict_json(render(flat, "json"))
    assert doc["rows"][0]["v"] is None
    assert doc["rows"][0]["reasons"] == {"v": f"{NOT_FINITE} (nan)"}
    assert doc["rows"][1] == {"model": "b", "v": 1.0} and doc["odd"] == [None, {"deep": None}]
    pivot = _table((key_cell("a"), Cell("inf", inf, "ok", {"spread_s": nan})),
                   layout=Layout.PIVOT)
    cell = strict_json(render(pivot, "json"))["rows"][0]["cells"]["v"]
    assert cell == {"value": None, "status": "ok", "label": f"{NOT_FINITE} (inf)",
                    "spread_s": None}
    md = render(flat, "md")
    assert "| a | nan |" in md  # the display text is as the table has it
