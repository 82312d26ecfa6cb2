"""``dltop export --table summary``, the scaling table's markers, and export's bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.cli.parser import build_parser
from dltop.report import data as report_data
from dltop.report.html import summary_html
from dltop.results import bootstrap, export, queries, scaling, summary
from dltop.results.render import render
from dltop.store import connect, memory_db

# cpu:1: three ok repeats; cpu:2: one ok (superlinear: 2.5x on 2 threads), one oom,
# one never run.
SECONDS = {("cpu:1", 0): [0.10, 0.11, 0.12, 0.10], ("cpu:1", 1): [0.12, 0.12, 0.13, 0.12],
           ("cpu:1", 2): [0.11, 0.11, 0.11, 0.12], ("cpu:2", 0): [0.044, 0.044, 0.048, 0.044]}


@pytest.fixture
def db_path(tmp_path: Path, campaigns: Any) -> Path:
    path = tmp_path / "s.db"
    db = connect(path)
    cid, jobs = campaigns.create(
        db, campaigns.profile("summ", ["cpu:1", "cpu:2"], repeats=3), "summ")
    for job, job_id in jobs:
        key = (job.device.label, job.repeat)
        if key == ("cpu:2", 1):
            campaigns.add_run(db, cid, job_id, [], status="oom")
        if key in SECONDS:
            campaigns.add_run(db, cid, job_id, SECONDS[key])
    return path


def test_summary_rows(db_path: Path) -> None:
    db = connect(db_path, create=False)
    doc = json.loads(render(export.results_table(db, 1, "summary"), "json"))
    one, two = doc["rows"]
    assert (one["device"], one["runs"], one["repeats"], one["flags"]) == ("cpu:1", 3, 3, "")
    assert one["time"] == pytest.approx(0.11)  # median of run medians 0.105, 0.12, 0.11
    runs = [SECONDS[("cpu:1", r)] for r in range(3)]
    low, high = bootstrap.median_ci([[(s, 8) for s in r] for r in runs])
    assert (one["ci_low_s"], one["ci_high_s"]) == (pytest.approx(low), pytest.approx(high))
    assert low <= one["time"] <= high
    assert one["reasons"]["power"] == "n/a: no GPU"
    assert (two["runs"], two["repeats"], two["flags"]) == (1, 3, "incomplete")
    assert doc["units"]["throughput"] == "samples/s" and doc["units"]["power"] == "W"
    md = render(export.results_table(db, 1, "summary"), "md")
    assert "| fcn-r | torch | 8 | cpu:2 | 1/3 | 0.04400 |" in md  # fp32: the caption's
    assert "user/system/iowait split: n/a" not in md and "host iowait %" in md


def test_scaling_marks_superlinear_efficiency(db_path: Path) -> None:
    db = connect(db_path, create=False)
    rows = scaling.scaling_rows(db, 1)
    two = next(r for r in rows if r.device == "cpu:2")
    assert two.superlinear and two.efficiency is not None and two.efficiency > 1
    text = render(scaling.scaling_table(rows, "t"), "md")
    assert "%‡ |" in text and "‡ efficiency above 100 %" in text
    assert "\\textdaggerdbl{}" in render(scaling.scaling_table(rows, "t"), "latex")


def test_speedup_and_efficiency_arithmetic(campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(
        db, campaigns.profile("dp", ["gpu:1", "gpu:2", "gpu:4"], batch_sizes=[32]), "dp")
    for (_, job_id), seconds in zip(jobs, (0.4, 0.25, 0.2), strict=True):
        campaigns.add_run(db, cid, job_id, [seconds] * 3, 32, iterations=False)
    rows = scaling.scaling_rows(db, cid)
    assert [r.device for r in rows] == ["gpu:1", "gpu:2", "gpu:4"]
    assert [round(r.speedup or 0, 3) for r in rows] == [1.0, 1.6, 2.0]
    assert [round(r.efficiency or 0, 3) for r in rows] == [1.0, 0.8, 0.5]
    md = render(scaling.scaling_table(rows, "t"), "md")
    assert "| fcn-r | torch | 32 | gpu:4 | 0.2000 | 160.0 | 2.00 | 50% |" in md


def test_cli_summary_and_metrics(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", "--db", str(db_path), "--table", "summary"]) == 0
    assert "summary per configuration" in capsys.readouterr().out
    assert cli.main(["export", "--db", str(db_path), "--metric", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "in % (100 = one core)" in out and "n/a: not sampled" in out
    assert cli.main(["export", "--db", str(db_path), "--table", "pivot"]) == 0
    assert "median seconds per mini-batch" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--metric", "watts"], ["--table", "nope"]])
def test_cli_unknown_metric_or_table(db_path: Path, tmp_path: Path, argv: list[str]) -> None:
    out = tmp_path / "t.md"
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", "--db", str(db_path), *argv, "-o", str(out)])
    assert exc.value.code == 2 and not out.exists()


def test_cli_bad_input_writes_nothing(db_path: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.md"
    assert cli.main(["export", "--db", str(db_path), "--campaign", "7", "-o", str(out)]) == 2
    assert "no campaign 7" in capsys.readouterr().err and not out.exists()
    assert cli.main(["export", "--db", str(db_path), "--table", "summary", "--metric",
                     "power", "-o", str(out)]) == 2
    assert "--metric picks the pivot" in capsys.readouterr().err and not out.exists()
    db = connect(db_path, create=False)
    with pytest.raises(Exception, match="unknown metric 'watts'"):
        export.export_to_file(db, 1, str(out), metric="watts")
    with pytest.raises(Exception, match="unknown table 'nope'"):
        export.export_to_file(db, 1, str(out), table="nope")
    assert not out.exists()


def test_cli_metric_choices_match_the_metrics() -> None:
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    metric = next(a for a in commands.choices["export"]._actions if a.dest == "metric")
    assert tuple(metric.choices or ()) == export.METRICS


def test_intervals_say_why_they_are_missing(campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(
        db, campaigns.profile("bad", ["cpu:1"], batch_sizes=[8, 16, 32, 64]), "bad")
    seconds = {8: [0.1], 16: [0.1, float("nan"), 0.1], 32: [0.1, float("inf"), 0.1],
               64: [float("nan")]}
    for job, job_id in jobs:  # one run each: 1 iteration, NaN rows, an infinite time
        run_id = campaigns.add_run(db, cid, job_id, [0.1] * len(seconds[job.batch_size]))
        for idx, s in enumerate(seconds[job.batch_size]):  # as an old database left them
            db.execute("update iterations set seconds = ? where run_id = ? and idx = ?",
                       [s, run_id, idx])
    doc = json.loads(render(export.results_table(db, cid, "summary"), "json"))
    why = {r["batch"]: (r["ci_low_s"], r["ci_high_s"], r["reasons"].get("ci_low_s"))
           for r in doc["rows"]}
    assert why[8] == (None, None, "n/a: a run with 1 iteration")
    # NaN is stored as NULL and left out: two iterations of 0.1 s remain, of one run
    assert why[16] == (None, None, summary.ONE_RUN)
    assert why[32] == (None, None, "n/a: non-finite iteration times")
    assert why[64] == (None, None, "n/a: no iterations")


def test_one_run_shows_its_within_run_spread_labelled() -> None:
    spread = summary.within_run([(0.1 + 0.01 * i, 8) for i in range(10)])
    assert spread["n"] == 10 and "not an interval across repeats" in spread["what"]
    assert spread["p10_s"] == pytest.approx(0.109) and spread["p90_s"] == pytest.approx(0.181)


def test_one_run_gets_no_interval_in_any_output(campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(
        db, campaigns.profile("one", ["cpu:1"], batch_sizes=[8, 16], repeats=2), "one")
    for job, job_id in jobs:  # batch 8: repeats at 0.2 and 0.4 s; batch 16: the first only
        if job.batch_size == 8 or job.repeat == 0:
            campaigns.add_run(db, cid, job_id,
                              [0.2 + 0.2 * job.repeat + 0.001 * i for i in range(9)])
    # What one run's iterations would give: a tight band around its own median that the
    # second repeat lands far outside. Not an interval of the configuration's median.
    low, high = bootstrap.median_ci([[(0.2 + 0.001 * i, 8) for i in range(9)]])
    assert low >= 0.2 and high < 0.21
    doc = json.loads(render(export.results_table(db, cid, "summary"), "json"))
    rows = {r["batch"]: r for r in doc["rows"]}
    assert rows[8]["ci_low_s"] < 0.21 and rows[8]["ci_high_s"] > 0.39  # both repeats in it
    assert (rows[16]["ci_low_s"], rows[16]["ci_high_s"]) == (None, None)
    assert rows[16]["reasons"]["ci_low_s"] == rows[16]["reasons"]["ci_high_s"] == "n/a: one run"
    # its own spread, labelled within-run (statistics policy): 9 iterations, too few for
    # a p10/p90 (n >= 10); several runs have none
    assert rows[16]["within_run"]["what"].startswith("within-run p10-p90")
    assert rows[16]["within_run"]["n"] == 9 and rows[16]["within_run"]["p90_s"] is None
    assert "within_run" not in rows[8]
    for fmt in ("md", "csv", "latex"):
        assert "n/a: one run" in render(export.results_table(db, cid, "summary"), fmt)
    page = summary_html(report_data.build(db, [queries.resolve_campaign(db, cid)]))
    assert page.count("<td>n/a: one run") == 2
