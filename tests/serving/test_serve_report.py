"""Issue 41 item 6: the report's serving figures and a serve run's requests figure, from a
real serve campaign against the streaming fake (tests/programs/fake_openai.py)."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.report import data, html, specs
from dltop.report.content import Figure, Report
from dltop.results import queries
from dltop.store.reader import open_reader

pytestmark = pytest.mark.slow

PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 8
prompt_tokens = 4
iterations = 8
warmup = 1
timeout_s = 30
[[matrix]]
models = ["steady", "multi"]
request_rate = [20, 50]
concurrency = 4
arrival = "constant"
slo_ttft_ms = 1000
slo_tpot_ms = 50
"""


def _dltop(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), *args],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert "Traceback" not in res.stderr, res.stderr
    return res


def _report(db: Path) -> Report:
    reader = open_reader(db)
    return data.build(reader, queries.resolve_campaigns(reader, "1"))


def _fig(figs: tuple[Figure, ...], key: str) -> Figure:
    return next(f for f in figs if f.key == key)


def _points(fig: Figure, panel: str) -> dict[str, dict[float, float]]:
    out: dict[str, dict[float, float]] = {}
    for r in fig.rows:
        if r["panel"] == panel:
            out.setdefault(str(r["series"]).split()[1], {})[r["x"]] = r["value"]
    return out


def test_serving_figures_plot_the_serving_numbers(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "20", "--itl-ms", "4")
    profile = tmp_path / "serve.toml"
    profile.write_text(PROFILE.format(url=url))
    db = tmp_path / "d.db"
    res = _dltop(db, "run", str(profile))
    assert res.returncode == 0, res.stdout + res.stderr
    out = _dltop(db, "export", "--table", "summary", "--format", "json")
    rows: list[dict[str, Any]] = json.loads(out.stdout)["rows"]
    cells = {(r["model"], r["identity"]["request_rate"]): r for r in rows}
    assert len(cells) == 4

    rep = _report(db)
    lat = _fig(rep.figures, "serve-latency")
    # 8 requests a configuration: p50 only (a p99 needs 100), a point per engine and rate
    assert lat.panels == ("TTFT p50 s", "TPOT p50 s") and "a p99 needs 100" in lat.caption
    for panel, metric in (("TTFT p50 s", "ttft"), ("TPOT p50 s", "tpot")):
        got = _points(lat, panel)
        assert got == {m: {rate: cells[(m, rate)]["detail"][metric]["p50_s"]
                           for rate in (20, 50)} for m in ("steady", "multi")}
    for r in lat.rows:
        assert r["n"] == 8 and r["low"] <= r["value"] <= r["high"]
        assert r["client_bound"] is False
    good = _fig(rep.figures, "serve-goodput")
    assert _points(good, "goodput req/s") == {
        m: {rate: cells[(m, rate)]["goodput"] for rate in (20, 50)} for m in ("steady", "multi")}
    assert "SLOs: tpot 50; ttft 1000" in good.caption
    tput = _fig(rep.figures, "serve-throughput")
    # x: TPOT p50, y: output tokens/s, of the same configuration
    assert sorted((str(r["series"]).split()[1], r["x"], r["value"]) for r in tput.rows) == \
        sorted((m, c["detail"]["tpot"]["p50_s"], c["output-rate"]) for (m, _), c in cells.items())
    energy = _fig(rep.figures, "serve-energy")  # CPU-only here: N/A and why, per engine
    assert energy.omitted.startswith("N/A: ") and "no GPU" in energy.omitted

    # each serve run's requests follow its run figure
    keys = [f.key for f in rep.runs]
    run_ids = [int(f.extra["run_id"]) for f in rep.runs if f.kind == "run"]
    assert len(run_ids) == 4
    for rid in run_ids:
        assert keys.index(f"serve-run-{rid}") == keys.index(f"run-{rid}") + 1
        fig = _fig(rep.runs, f"serve-run-{rid}")
        ttft = [r for r in fig.rows if r["panel"] == "latency s" and r["series"] == "TTFT"]
        e2e = [r for r in fig.rows if r["panel"] == "latency s" and r["series"] == "E2E"]
        assert len(ttft) == len(e2e) == 8 and all(a["value"] < b["value"]
                                                   for a, b in zip(ttft, e2e, strict=True))
        assert sum(r["count"] for r in fig.rows if r["panel"] == "TTFT ms") == 8
        # 8 tokens a request: 7 per-token ITLs each
        assert sum(r["count"] for r in fig.rows if r["panel"] == "ITL ms") == 8 * 7
        assert "8 measured requests, 0 failed" in fig.caption
        # its run figure's s/iter are requests' latencies, and its caption says so
        run = _fig(rep.runs, f"run-{rid}").caption
        assert "s/request end to end" in run and "not a time per iteration" in run
        assert " s/iter;" not in run

    # a client-bound configuration's points are ringed and named
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("update runs set client_bound = (id = ?)", [run_ids[0]])
    conn.close()
    rep = _report(db)
    lat = _fig(rep.figures, "serve-latency")
    bound = {r["series"] for r in lat.rows if r["client_bound"]}
    assert len(bound) == 1 and f"ringed: client-bound ({bound.pop()})" in lat.caption
    spec = specs.spec(lat)
    assert any(layer["mark"].get("size") == 120 for view in spec["hconcat"]
               for layer in view["layer"] if isinstance(layer["mark"], dict))
    page = "\n".join(html.page_parts(rep))
    assert "Serving: latency, throughput" in page and 'id="serve-latency"' in page
    assert f'id="serve-run-{run_ids[0]}" class="run" data-run="{run_ids[0]}"' in page
    assert page.count("<option") == 4

    # GPU energy stored over the measured window: J per output token of the ok requests
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("update jobs set device = 'gpu:1'")
        conn.execute("update runs set energy_j = 10.0 * id, gpu_readings = 20, window_s = 2.0")
    conn.close()
    energy = _fig(_report(db).figures, "serve-energy")
    assert not energy.omitted and energy.panels == ("J/output token",)
    tokens = {(r["model"], r["identity"]["request_rate"]): 8 * 8 for r in rows}  # all ok
    ids = {(str(r["series"]).split()[1], r["x"]): r for r in energy.rows}
    assert len(ids) == 4
    for (model, rate), row in ids.items():
        run_id = next(i for i in run_ids if f"openai {model} " in (
            title := _fig(rep.runs, f"run-{i}").title) and f" {rate:g} #1" in title)
        assert row["value"] == pytest.approx(10.0 * run_id / tokens[(model, rate)])
        assert row["n"] == 1
    assert "SIMULATED" not in energy.title
    conn = sqlite3.connect(db)
    with conn:  # readings of simulated GPUs (--fake-gpus) are said so
        conn.execute("update runs set telemetry_simulated = 1 where id = ?", [run_ids[0]])
    conn.close()
    energy = _fig(_report(db).figures, "serve-energy")
    assert energy.title.endswith("(SIMULATED GPUs)") and "not real hardware" in energy.caption


INF_PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 4
prompt_tokens = 4
iterations = 6
warmup = 1
timeout_s = 30
concurrency = 2
[[matrix]]
models = ["steady"]
request_rate = "inf"
[[matrix]]
models = ["steady"]
request_rate = 40
"""


def test_a_rate_asked_inf_is_placed_at_the_rate_reached(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "10", "--itl-ms", "2")
    profile = tmp_path / "serve.toml"
    profile.write_text(INF_PROFILE.format(url=url))
    db = tmp_path / "d.db"
    res = _dltop(db, "run", str(profile))
    assert res.returncode == 0, res.stdout + res.stderr
    out = _dltop(db, "export", "--table", "summary", "--format", "json")
    rows: list[dict[str, Any]] = json.loads(out.stdout)["rows"]
    (inf,) = [r for r in rows if r["identity"]["request_rate"] != 40]
    lat = _fig(_report(db).figures, "serve-latency")
    xs = sorted({r["x"] for r in lat.rows})
    assert len(xs) == 2 and 40.0 in xs  # one line, two points: 40 asked, inf reached
    assert [x for x in xs if x != 40.0] == [inf["req-rate"]] and inf["req-rate"] > 0
    assert "x: rate reached for 1 configuration(s) asked inf" in lat.caption
    good = _fig(_report(db).figures, "serve-goodput")
    assert good.omitted == "N/A: no SLO given (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)"


TABLE_PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 6
prompt_tokens = 4
iterations = 20
warmup = 1
timeout_s = 30
concurrency = 2
arrival = "constant"
[[matrix]]
models = ["steady"]
request_rate = [40, 80]
"""


def test_serve_tables_say_what_they_measure(tmp_path: Path, fake_server) -> None:
    """The audits' findings on a real serve campaign: a caption of training settings,
    TFLOP/s and MFU n/a on every row, n said twice in a percentile cell, an empty CSV p99
    without a reason, and "median s/iter" for the request latency."""
    url = fake_server("--ttft-ms", "10", "--itl-ms", "2")
    profile = tmp_path / "serve.toml"
    profile.write_text(TABLE_PROFILE.format(url=url))
    db = tmp_path / "d.db"
    for _ in range(2):
        res = _dltop(db, "run", str(profile))
        assert res.returncode == 0, res.stdout + res.stderr
    md = _dltop(db, "export", "--campaign", "1", "--table", "summary", "--format", "md").stdout
    lines = md.splitlines()
    (constant,) = [line for line in lines if line.startswith("constant:")]
    for word in ("lr ", "momentum", "optimizer", "data ", "precision", "batch scaling"):
        assert word not in constant, constant
    for word in ("prompt 4", "new tokens 6", "concurrency 2", "api chat", "arrival constant"):
        assert word in constant, constant
    header = lines[2]
    assert "TFLOP/s" not in md and "MFU" not in md and "| precision |" not in header
    assert "| median e2e s |" in header and "| rate (req/s) |" in header
    # 20 requests: p90 shown, p99 n/a, n said once
    assert "/ n/a: n=20 |" in md and "(n 20)" not in md
    csv_text = _dltop(db, "export", "--campaign", "1", "--table", "summary",
                      "--format", "csv").stdout
    body = [line for line in csv_text.splitlines() if not line.startswith("#")]
    row = next(csv.DictReader(body))
    assert "TFLOP/s" not in row and "MFU %" not in row and "precision" not in row
    assert row["TTFT p50/p90/p99 s p99_s"] == ""
    assert row["TTFT p50/p90/p99 s status"] == "ok; p99 n/a: n=20"  # the empty cell's why
    doc = json.loads(_dltop(db, "export", "--campaign", "1", "--table", "summary",
                            "--format", "json").stdout)
    ttft = doc["rows"][0]["detail"]["ttft"]  # JSON's null p99 says why beside it
    assert ttft["p99_s"] is None and ttft["note"] == "p99 n/a: n=20"
    assert float(row["TTFT p50/p90/p99 s p90_s"]) > 0
    out = _dltop(db, "compare", "1", "2")
    assert out.returncode == 0, out.stderr
    title = out.stdout.splitlines()[0]
    assert title.endswith(": median e2e s/request"), title
    assert "| precision |" not in out.stdout and "lr 0.01" not in out.stdout
    pivot = _dltop(db, "export", "--campaign", "1", "--format", "md").stdout
    assert pivot.splitlines()[0].endswith(": median end-to-end request latency in s")
    assert "optimizer" not in pivot
