"""``dltop check`` and the summary's reference column on a database built through the
store (issue 33 item 7): pass, fail below and above the band, no reference, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.results import checks
from dltop.results.render import render
from dltop.results.summary import summary_table
from dltop.store import connect

PROFILE = """
name = "refs"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1", "cpu:2", "cpus:2", "cpu:3"]
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:4"]
repeats = 2  # two runs: an interval (one run has none, and is judged on its point)
[references]
"fcn-r/torch/fp32/cpu:1" = { s_per_iter = [0.010, -0.10, 0.10] }
"fcn-r/torch/fp32/cpu:2" = { samples_per_s = [800, -0.05, 0.05] }
"fcn-r/torch/fp32/cpus:2" = { samples_per_s = [100, -0.05, 0.05] }
"fcn-r/torch/*/cpu:4" = { s_per_iter = [0.040, -0.05, 0.05] }
"fcn-r/*/*/cpu:3" = { s_per_iter = [0.040, -0.05, 0.05] }
"""


def build(path: Path, campaigns: Any, *, failing: bool = True) -> None:
    db = connect(path)
    cid, jobs = campaigns.create(db, PROFILE if failing else PROFILE.split("\n\"fcn-r/torch/"
                                                                           "fp32/cpu:2\"")[0]
                                 + "\n", name="refs")
    ids: dict[str, list[int]] = {}
    for spec, job_id in jobs:
        ids.setdefault(spec.device.label, []).append(job_id)
    # cpu:1: one run of 0.0101 s/iter, no interval: its point inside 0.009..0.011: pass
    campaigns.add_run(db, cid, ids["cpu:1"][0], [0.0100, 0.0101, 0.0102, 0.0101, 0.0100])
    # cpu:2: 8 samples / 0.02 s = 400 samples/s, under 760: fail (below)
    campaigns.add_run(db, cid, ids["cpu:2"][0], [0.020, 0.021, 0.020, 0.019, 0.020])
    # cpu:4: two runs, medians 0.031 and 0.044: the interval reaches the band 0.038..0.042
    # though the median of both is outside it: not shown to miss
    campaigns.add_run(db, cid, ids["cpu:4"][0], [0.030, 0.031, 0.032, 0.031, 0.030])
    campaigns.add_run(db, cid, ids["cpu:4"][1], [0.045, 0.044, 0.043, 0.044, 0.045])
    # cpus:2: 8 / 0.04 = 200 samples/s, above 95..105: fail (above)
    campaigns.add_run(db, cid, ids["cpus:2"][0], [0.040, 0.041, 0.039, 0.040])
    # cpu:3: a reference and no ok run: nothing was measured, a failure
    campaigns.add_run(db, cid, ids["cpu:3"][0], [], status="crashed")
    db.close()


def test_check_judges_the_interval_against_the_band(tmp_path: Path, campaigns: Any) -> None:
    build(tmp_path / "r.db", campaigns)
    db = connect(tmp_path / "r.db")
    got = {v.result.device: v for v in checks.check(db, [1])}
    assert got["cpu:1"].outcome == "pass"
    assert got["cpu:1"].measured == pytest.approx(0.0101)
    assert got["cpu:1"].interval is None  # one run: judged on its point
    assert (got["cpu:2"].outcome, got["cpu:2"].why) == ("fail", "below")
    assert got["cpu:2"].measured == pytest.approx(400)
    assert got["cpu:4"].outcome == "pass"  # the point is outside the band; its CI is not
    low, high = got["cpu:4"].interval or (0, 0)
    assert not 0.038 <= got["cpu:4"].measured <= 0.042 and low < 0.038 < high
    assert (got["cpus:2"].outcome, got["cpus:2"].why) == ("fail", "above")
    assert (got["cpu:3"].outcome, got["cpu:3"].why) == ("fail", "no ok run: failed")
    # the summary shows one cell per configuration
    table = summary_table(db, 1)
    rows = json.loads(render(table, "json"))["rows"]
    assert {r["device"]: r["reference"] for r in rows} == {
        "cpu:1": "pass", "cpu:2": "fail (samples_per_s below)", "cpu:4": "pass",
        "cpus:2": "fail (samples_per_s above)", "cpu:3": "fail (no ok run: failed)"}


def test_check_cli_exit_codes(tmp_path: Path, campaigns: Any,
                              capsys: pytest.CaptureFixture[str]) -> None:
    build(tmp_path / "f.db", campaigns)
    assert cli.main(["check", "--db", str(tmp_path / "f.db"), "1"]) == 1
    out, err = capsys.readouterr()
    assert "fail (below)" in out and "| pass " in out and "samples_per_s (samples/s)" in out
    # 4 significant digits with their trailing zeros, as the summary prints them
    assert "| 0.01000 | -10% / +10% |" in out and "| 400.0 |" in out, out
    assert "3 of 5 reference check(s) failed" in err
    build(tmp_path / "p.db", campaigns, failing=False)
    assert cli.main(["check", "--db", str(tmp_path / "p.db"), "refs", "--format",
                     "csv"]) == 0
    out = capsys.readouterr().out
    assert "no reference" in out and "fail" not in out.split("no reference")[0]
    # which campaign and environment were judged, as every export says (JSON said
    # "campaigns": [], "environment": null, and no format had the environment)
    assert "\n# Environment: host " in out
    assert cli.main(["check", "--db", str(tmp_path / "p.db"), "refs", "--format",
                     "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in doc["campaigns"]] == ["refs"]
    assert doc["environment"]["hosts"] and doc["caption"][0].startswith("Environment: ")
    assert cli.main(["check", "--db", str(tmp_path / "p.db"), "7"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_no_reference_column_without_references(tmp_path: Path, campaigns: Any) -> None:
    db = connect(tmp_path / "n.db")
    cid, jobs = campaigns.create(db, campaigns.profile("plain", ["cpu:1"]), name="plain")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.1])
    assert "reference" not in [c.key for c in summary_table(db, cid).columns]
    assert [v.outcome for v in checks.check(db, [cid])] == ["no reference"]


def test_check_json_never_prints_nan(tmp_path: Path, campaigns: Any,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A reference stored NaN (before the loader refused it, issue 38): ``check --format
    json`` prints null and the reason, never a bare NaN, which JSON has not."""
    path = tmp_path / "nan.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("nan", ["cpu:1"]) + (
        '[references]\n"fcn-r/torch/fp32" = { s_per_iter = [0.25, -0.5, 0.125] }\n'),
        name="nan")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.1])
    # where check reads references (SQLite before 3.42 calls NaN in the job_specs view's
    # json_set malformed JSON: the spec it reads identities from is left as it was)
    assert db.execute("update job_configs set spec_json = replace(replace(spec_json, "
                      "'0.25', 'NaN'), '0.125', 'Infinity')").rowcount == 1
    db.conn.commit()
    db.close()
    assert cli.main(["check", "--db", str(path), "1", "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert "NaN" not in out and "Infinity" not in out
    (row,) = json.loads(out)["rows"]
    assert row["reference"] is None and row["tolerance"] == ""
    assert row["result"] == "fail (the reference is not finite: [nan, -0.5, inf])"


def test_check_judges_the_summarys_samples_per_s(tmp_path: Path, campaigns: Any) -> None:
    """One figure, one value: on skewed iterations batch / median (8 / 0.02 = 400) and
    total samples / total seconds (40 / 0.13 = 307.7) differ; check judges and prints
    the summary's (docs/metrics.md, one samples/s), its interval scaled around it."""
    db = connect(tmp_path / "s.db")
    cid, jobs = campaigns.create(db, campaigns.profile("skew", ["cpu:1"]) + (
        '[references]\n"fcn-r/torch/fp32" = { samples_per_s = [300, -0.05, 0.05] }\n'),
        name="skew")
    campaigns.add_run(db, cid, jobs[0][1], [0.02, 0.02, 0.02, 0.02, 0.05])
    (v,) = checks.check(db, [cid])
    (row,) = json.loads(render(summary_table(db, cid), "json"))["rows"]
    assert v.measured == pytest.approx(40 / 0.13) == pytest.approx(row["throughput"])
    assert v.outcome == "pass"  # 307.7 in 285..315; batch / median's 400 would fail
