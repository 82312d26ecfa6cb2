"""Tables at a glance (issue 40 items 5 and 9): each n/a reason once under the table,
latencies in ms, 4 significant digits, ``--columns``, and ``cpu:N`` beyond the host's
cores flagged. Markdown and LaTeX change; CSV and JSON keep full numbers, seconds and
each cell's reason. Over the committed GPU databases (docs/gpu-runs/, read-only) and the
``campaigns`` fixture."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

from dltop.results import export
from dltop.results.display import number_text, superscript
from dltop.results.render import render
from dltop.store import Store, memory_db
from dltop.store.views import ensure_views

RUNS = Path(__file__).parents[2] / "docs/gpu-runs"
H200_CHECK = RUNS / "2026-11-26-h200-check/gpu-check.db"
H200_LLM = RUNS / "2026-11-26-h200-llm/campaign.db"
WINDOW = "window 0.031 s, readings not counted (set min_time_s)"
RANGED = "window 0.024 to 0.67 s, readings not counted (set min_time_s)"
"""The H200 check's 14 window lengths, one footnote: reasons equal but for numbers."""


def _read_only(path: Path) -> sqlite_utils.Database:
    db = sqlite_utils.Database(sqlite3.connect(f"file:{path}?mode=ro", uri=True))
    ensure_views(db.conn)  # temporary views, as readers make them
    return db


def _dltop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=120, check=False,
                          env=None if env is None else {**os.environ, **env})


def test_numbers_keep_4_significant_digits_and_group_thousands() -> None:
    assert number_text(392155.2) == "392 200"
    assert number_text(1368.0) == "1 368"
    assert number_text(9999.6) == "10 000"
    assert number_text(0.6177) == "0.6177"
    assert number_text(12.345678) == "12.35"
    assert number_text(0.00001234) == "0.00001234"  # never 1.234e-05 in a table
    assert number_text(-2133.3) == "-2 133"
    assert superscript(15) == "¹⁵"


def test_h200_check_summary_states_each_reason_once() -> None:
    """The issue's target: 170 cells said the same window reason; now one line does."""
    table = export.results_table(_read_only(H200_CHECK), 1, "summary")
    md = render(table, "md")
    assert md.count(RANGED) == 1 and WINDOW not in md
    body = [line for line in md.splitlines() if line.startswith("| ")]
    assert body and not any("n/a:" in line for line in body)  # no reason inside a cell
    # every mark used in a cell is explained exactly once below, in order of first use
    notes = [line for line in md.splitlines() if line and line[0] in "¹²³⁴⁵⁶⁷⁸⁹"]
    assert len(notes) == len({line.partition(" ")[2] for line in notes}) >= 1
    # the check ran each configuration once: its intervals, n/a in every row, are named
    # once instead of filling two columns
    assert "not shown, n/a in every row: CI95 low s, CI95 high s (one run)" in md
    assert "| CI95 low s |" not in md and "| CI95 low s |" in render(table, "md",
                                                                      every_column=True)
    assert notes[0].startswith("¹ n/a: ")
    assert sum(line.endswith(f" n/a: {RANGED}") for line in notes) == 1
    assert "| 682 700 |" in md  # samples/s 682742.7: 4 significant digits
    tex = render(table, "latex")
    assert tex.count(RANGED.replace("_", r"\_")) == 1 and r"n/a\textsuperscript{1}" in tex
    # CSV and JSON are read by programs: the whole reason in each cell, full numbers
    rows = list(csv.DictReader(line for line in render(table, "csv").splitlines()
                               if not line.startswith("#")))
    assert sum(r["power W status"] == f"n/a: {WINDOW}" for r in rows) == 1
    assert sum(list(r.values()).count(f"n/a: {WINDOW}") for r in rows) == 10
    assert float(rows[0]["samples/s"]) == pytest.approx(682742.7, abs=0.1)
    doc = json.loads(render(table, "json"))
    assert doc["rows"][0]["reasons"]["power"] == f"n/a: {WINDOW}"


def test_h200_llm_latencies_in_ms_in_markdown_seconds_in_json() -> None:
    table = export.results_table(_read_only(H200_LLM), 1, "summary")
    md = render(table, "md")
    header = md.splitlines()[2]
    assert "| TPOT p50/p90/p99 (ms) |" in header and "| TTFT p50/p90/p99 (ms) |" in header
    assert "| median s |" in header  # training seconds per mini-batch stay seconds
    # was 0.0006177 / ... s; p99 of 10 requests is withheld (the percentile rule)
    assert "| 0.6177 / 0.6199 / n/a: n=10 |" in md
    assert "0.0006177" not in md
    doc = json.loads(render(table, "json"))
    cuda_graphs = next(r for r in doc["rows"] if r["identity"].get("cuda_graphs")
                       and r["tpot"] is not None)
    assert cuda_graphs["tpot"] == pytest.approx(0.0006177, rel=1e-3)  # seconds, as before
    assert cuda_graphs["detail"]["tpot"]["p90_s"] == pytest.approx(0.0006199, rel=1e-3)
    pivot = render(export.results_table(_read_only(H200_LLM), 1, metric="ttft"), "md")
    assert "time to first token in ms" in pivot.splitlines()[0]
    assert "| gpu:1 (ms) |" in pivot and "3.704 / 5.013 / n/a: n=10" in pivot


def test_columns_pick_and_order_and_unknown_is_exit_2(tmp_path: Path) -> None:
    for f in H200_CHECK.parent.glob("gpu-check.db*"):
        shutil.copy(f, tmp_path / f.name)
    db = str(tmp_path / "gpu-check.db")
    out = _dltop("export", "--db", db, "--table", "summary",
                 "--columns", "model,precision,throughput", "--columns", "power W")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[2] == "| model | precision | samples/s | power W |"
    assert lines[4].startswith("| fcn-r | bf16 | 682 700 | n/a¹ |")
    csv_out = _dltop("export", "--db", db, "--table", "summary", "--format", "csv",
                     "--columns", "model,samples/s")
    header = next(line for line in csv_out.stdout.splitlines() if not line.startswith("#"))
    assert header == "model,samples/s,samples/s status"
    # an ASCII stdout: the marks as ^N, one number each (docs/exports.md)
    ascii_out = _dltop("export", "--db", db, "--table", "summary", "--columns",
                       "model,power", env={"PYTHONIOENCODING": "ascii"})
    assert ascii_out.returncode == 0 and "| fcn-r | n/a^1 |" in ascii_out.stdout
    assert "\n^1 n/a: window 0.024 to 0.67 s" in ascii_out.stdout
    bad = _dltop("export", "--db", db, "--table", "summary", "--columns", "model,speed")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "unknown column 'speed'" in bad.stderr and "samples/s, power W" in bad.stderr


def test_cpu_beyond_the_hosts_cores_is_flagged_in_every_table(campaigns) -> None:  # type: ignore[no-untyped-def]
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("over", ["cpu:1", "cpu:8"]))
    for _job, job_id in jobs:
        run = campaigns.add_run(db, cid, job_id, [0.1, 0.1, 0.1])
        Store(db).record_environment(run, {"logical_cores": 2, "physical_cores": 1,
                                           "cpu_model": "test cpu"})
    caption = "cpu:8 on a 2-core host: oversubscribed"
    pivot = render(export.results_table(db, cid), "md")
    assert "| 0.1000 | 0.1000! |" in pivot and caption in pivot
    assert "! oversubscribed" in pivot  # the mark's note
    summary = export.results_table(db, cid, "summary")
    flags = {r.cells[3].text: r.cells[-2].text for r in summary.rows}  # device -> flags
    assert flags == {"cpu:1": "", "cpu:8": "oversubscribed"}
    assert caption in summary.caption
    scaling = render(export.results_table(db, cid, "scaling"), "md")
    assert "0.1000!" in scaling and caption in scaling
    doc = json.loads(render(export.results_table(db, cid), "json"))
    cells = doc["rows"][0]["cells"]
    assert cells["cpu:8"]["oversubscribed"] is True and "oversubscribed" not in cells["cpu:1"]
    assert caption in doc["caption"]
    assert caption in render(export.results_table(db, cid), "csv")  # a '#' line


def test_runs_listing_notes_oversubscribed_runs(campaigns, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from dltop.cli import main
    from dltop.store import connect

    db = connect(tmp_path / "r.db")
    cid, jobs = campaigns.create(db, campaigns.profile("over", ["cpu:1", "cpu:8"]))
    for _job, job_id in jobs:
        run = campaigns.add_run(db, cid, job_id, [0.1, 0.1, 0.1], samples=40000)
        Store(db).record_environment(run, {"logical_cores": 2})
    db.close()
    assert main(["runs", "--db", str(tmp_path / "r.db")]) == 0
    lines = capsys.readouterr().out.splitlines()
    eight = next(line for line in lines if " cpu:8 " in line)
    one = next(line for line in lines if " cpu:1 " in line)
    assert "oversubscribed (2-core host)" in eight and "oversubscribed" not in one
    assert "400 000" in eight  # samples/s from 1 000 on: 4 significant digits, grouped


@pytest.mark.slow  # spawns dltop or runner processes: over 1 s idle
def test_where_keeps_the_rows_asked_and_refuses_an_unknown_column(tmp_path: Path) -> None:
    """``--where model=resnet-50``: one command answers "the fastest and most frugal
    ResNet-50 setting" over the H200 databases (issue 40's first question)."""
    dbs = [str(H200_CHECK), str(H200_CHECK.parent / "options.db")]
    args = [a for db in dbs for a in ("--db", db)]
    out = _dltop("export", *args, "--campaign", "all", "--table", "summary",
                 "--where", "model=resnet-50", "--where", "precision=BF16,fp16",
                 "--columns", "model,precision,samples/s,J/sample")
    assert out.returncode == 0, out.stderr
    body = [line for line in out.stdout.splitlines() if line.startswith("| resnet")]
    assert len(body) >= 5 and all("| bf16 |" in b or "| fp16 |" in b for b in body)
    assert not any(line.startswith("| fcn-r") for line in out.stdout.splitlines())
    # rows alike in the columns shown (bf16 ResNet-50 of torch and of JAX, with and
    # without CUDA graphs) say what tells them apart, once, under the table
    assert sum(b.startswith("| resnet-50 | bf16 |") for b in body) > len(
        {b.partition(" | ")[2].split(" | ")[0] for b in body})
    alike = [line for line in out.stdout.splitlines() if line.startswith("rows that look")]
    assert len(alike) == 1 and "framework" in alike[0] and "cuda graphs" in alike[0]
    whole = _dltop("export", *args, "--campaign", "all", "--table", "summary",
                   "--where", "model=resnet-50").stdout
    assert "| resnet-50 |" in whole and "look alike" not in whole  # every key shown
    bad = _dltop("export", *args, "--where", "modle=resnet-50")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "key columns: model, framework" in bad.stderr
    none = _dltop("export", *args, "--where", "model")
    assert none.returncode == 2 and "COLUMN=VALUE" in none.stderr


def test_columns_na_in_every_row_are_named_once_not_drawn(campaigns) -> None:  # type: ignore[no-untyped-def]
    """A CPU host's summary: power, J/sample, GPU memory, MFU and the one-run intervals
    were columns of n/a in every row; a configuration whose run crashed (empty cells)
    does not keep them. Markdown and LaTeX name them once; CSV and --columns keep them."""
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("cpu", ["cpu:1", "cpu:2"]))
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.1])
    campaigns.add_run(db, cid, jobs[1][1], [0.1], status="crashed")
    table = export.results_table(db, cid, "summary")
    md = render(table, "md")
    header = md.splitlines()[2]
    assert "| median s |" in header and "| power W |" not in header
    assert "| CI95 low s |" not in header and "| failed |" in md
    (note,) = [line for line in md.splitlines() if line.startswith("not shown, n/a in")]
    assert "power W, GPU mem MiB, GPU dev MiB (no GPU)" in note and "(one run)" in note
    assert "power W" not in render(table, "latex").split("\\toprule")[1].split("\\\\")[0]
    assert "power W,power W status" in render(table, "csv")
    assert "| power W |" in render(table, "md", every_column=True)


def test_a_setting_the_same_in_every_row_is_stated_once(campaigns, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """precision fp32 on every row of the summary and compare, and check's system ``-``
    on every row: a setting of the whole table is stated once in the caption (where the
    constant line does not say it already), one no row has is left out and named once;
    a precision that varies stays a column; CSV keeps every column."""
    from dltop import cli
    from dltop.store import connect

    path = tmp_path / "p.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("p", ["cpu:1", "cpu:2"]) + (
        '[references]\n"fcn-r/torch/fp32" = { s_per_iter = [0.1, -0.5, 0.5] }\n'), name="p")
    for _, job_id in jobs:
        campaigns.add_run(db, cid, job_id, [0.1, 0.1, 0.1])
    md = render(export.results_table(db, cid, "summary"), "md")
    assert "| precision |" not in md and "| fp32 |" not in md
    assert md.count("precision fp32") == 1  # the constant line's, not a second line
    assert ",precision," in render(export.results_table(db, cid, "summary"), "csv")
    db.close()
    assert cli.main(["check", "--db", str(path), "1"]) == 0
    out = capsys.readouterr().out
    assert "| system |" not in out and "| precision |" not in out and "| - |" not in out
    assert "the same in every row: precision fp32" in out
    assert "not shown, none in any row: system (CSV and JSON keep it)" in out
    assert cli.main(["check", "--db", str(path), "1", "--format", "csv"]) == 0
    assert ",precision,system," in capsys.readouterr().out
    mixed = memory_db()
    one = campaigns.profile("m", ["cpu:1"])
    cid, jobs = campaigns.create(mixed, one + one[one.index("[[matrix]]"):].replace(
        "[[matrix]]", '[[matrix]]\nprecision = "bf16"'), name="m")
    for _, job_id in jobs:
        campaigns.add_run(mixed, cid, job_id, [0.1, 0.1, 0.1])
    md = render(export.results_table(mixed, cid, "summary"), "md")
    assert "| precision |" in md and "| bf16 |" in md and "the same in every row" not in md
