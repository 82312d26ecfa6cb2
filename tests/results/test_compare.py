"""``dltop compare A B``: verdicts on constructed campaigns, output formats, exit codes."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.results import compare
from dltop.store import connect


def add_campaign(campaigns: Any, path: Path, name: str, centre: dict[int, float],
                 batch_sizes: tuple[int, ...] = (8, 16, 32), model: str = "fcn-r",
                 seed: int = 0) -> int:
    """One campaign; every run of batch b has 30 iterations around ``centre[b]`` s (±2 %)."""
    db = connect(path)
    profile = campaigns.profile("cmp", ["cpu:1"], batch_sizes=batch_sizes, models=[model],
                                repeats=2)
    cid, jobs = campaigns.create(db, profile, name)
    rng = random.Random(seed)
    for job, job_id in jobs:
        if job.batch_size in centre:
            seconds = [centre[job.batch_size] * rng.uniform(0.98, 1.02) for _ in range(30)]
            campaigns.add_run(db, cid, job_id, seconds, job.batch_size)
    return cid


@pytest.fixture
def db_path(tmp_path: Path, campaigns: Any) -> Path:
    path = tmp_path / "c.db"
    add_campaign(campaigns, path, "base", {8: 0.10, 16: 0.20, 32: 0.40}, seed=1)
    # batch 8 twice as slow, batch 16 twice as fast, batch 32 unchanged
    add_campaign(campaigns, path, "new", {8: 0.20, 16: 0.10, 32: 0.40}, seed=2)
    return path


def by_batch(rows: list[compare.Comparison]) -> dict[int, compare.Comparison]:
    return {r.label[2]: r for r in rows}


def test_verdicts(db_path: Path) -> None:
    db = connect(db_path, create=False)
    rows = by_batch(compare.compare(db, 1, 2))
    assert rows[8].verdict == "slower" and rows[8].ratio == pytest.approx(2.0, rel=0.03)
    assert rows[16].verdict == "faster" and rows[16].ratio == pytest.approx(0.5, rel=0.03)
    assert rows[32].verdict == "no significant change"
    for r in rows.values():
        assert r.ci_low is not None and r.ci_high is not None
        assert r.ci_low < r.ratio < r.ci_high  # type: ignore[operator]
    thr = by_batch(compare.compare(db, 1, 2, "throughput"))
    assert thr[8].verdict == "slower" and thr[8].ratio == pytest.approx(0.5, rel=0.03)
    assert thr[16].verdict == "faster"


def test_threshold_hides_small_significant_changes(db_path: Path, campaigns: Any) -> None:
    add_campaign(campaigns, db_path, "tiny", {8: 0.103, 16: 0.20, 32: 0.40}, seed=3)
    db = connect(db_path, create=False)
    loose = by_batch(compare.compare(db, 1, 3, threshold=0.05))[8]
    assert loose.ratio is not None and loose.ratio > 1.0
    assert loose.ci_low is not None and loose.ci_low > 1.0  # statistically significant...
    assert loose.verdict == "no significant change"  # ...but below the 5 % threshold
    assert by_batch(compare.compare(db, 1, 3, threshold=0.01))[8].verdict == "slower"


def test_configurations_on_one_side_are_listed(db_path: Path, campaigns: Any) -> None:
    add_campaign(campaigns, db_path, "partial", {8: 0.1}, seed=4)
    db = connect(db_path, create=False)
    rows = by_batch(compare.compare(db, 1, 3))
    assert rows[16].verdict == "not comparable: B -"  # queued in B, never ran
    add_campaign(campaigns, db_path, "wider", {8: 0.1}, batch_sizes=(8, 64))
    rows = by_batch(compare.compare(db, 4, 1))
    assert rows[64].verdict == "only in A" and rows[16].verdict == "only in B"


def test_cli_formats_and_exit_codes(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", "--db", str(db_path), "base", "new"]) == 0
    out = capsys.readouterr().out
    # precision is fp32 in every row: a setting of the table, in its constant line
    assert "| fcn-r | torch | 8 | cpu:1 | 0.1" in out and "slower" in out
    assert "| precision |" not in out and "constant: precision fp32," in out
    assert cli.main(["compare", "--db", str(db_path), "1", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in doc["rows"]] == ["slower", "faster",
                                                   "no significant change"]
    assert doc["a"]["name"] == "base" and doc["threshold"] == 0.05
    assert cli.main(["compare", "--db", str(db_path), "1", "2", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# Compare A = campaign 1")
    assert any(line.startswith("# Environment: host ") for line in lines)
    header = next(line for line in lines if not line.startswith("#"))
    assert header.endswith("B/A,B/A status,CI95 low,CI95 low status,CI95 high,"
                           "CI95 high status,runs A/B,A flags,B flags,verdict")
    # the n behind each side, as compare --by shows it (it was missing here)
    runs = {r["runs A/B"] for r in csv.DictReader(
        line for line in lines if not line.startswith("#"))}
    assert runs and all(re.fullmatch(r"[1-9]\d*/[1-9]\d*", n) for n in runs), runs
    # B slower in batch 8: a regression
    assert cli.main(["compare", "--db", str(db_path), "1", "2", "--fail-on-regression"]) == 1
    assert "1 configuration(s) conclusively slower" in capsys.readouterr().err
    # a campaign against itself is refused (issue 40): it was silently "no change"
    for same in (["1", "1"], ["base", "1"], ["1,2", "2,1"]):
        assert cli.main(["compare", "--db", str(db_path), *same,
                         "--fail-on-regression"]) == 2, same
        err = capsys.readouterr()
        assert "A and B are the same campaign(s)" in err.err and "--by SETTING" in err.err
        assert err.out == ""


def test_cli_bad_input_exits_2(db_path: Path, campaigns: Any,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", "--db", str(db_path), "1", "9"]) == 2
    err = capsys.readouterr().err
    # the error names the positional typed, not an option nobody gave
    assert "compare B: no campaign 9" in err and "--campaign" not in err
    assert cli.main(["compare", "--db", str(db_path), "8", "1"]) == 2
    assert "compare A: no campaign 8" in capsys.readouterr().err
    assert cli.main(["compare", "--db", str(db_path), "base", "nope"]) == 2
    assert "no campaign named 'nope'" in capsys.readouterr().err
    add_campaign(campaigns, db_path, "other", {8: 0.1}, model="alexnet-r")
    assert cli.main(["compare", "--db", str(db_path), "1", "other"]) == 2
    err = capsys.readouterr()
    assert "no configuration in common" in err.err and err.out == ""
    assert cli.main(["compare", "--db", str(db_path), "1", "2", "--threshold", "-1"]) == 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", "--db", str(db_path), "1", "2", "--metric", "power"])
    assert exc.value.code == 2


def flagged_db(campaigns: Any, path: Path) -> None:
    """Campaign 3 = campaign 2 with batch 8's second run contaminated and batch 16's
    runs noisy (stored flags, as the engine writes them)."""
    db = connect(path)
    profile = campaigns.profile("cmp", ["cpu:1"], batch_sizes=(8, 16, 32),
                                models=["fcn-r"], repeats=2)
    cid, jobs = campaigns.create(db, profile, "flagged")
    rng = random.Random(2)
    centre = {8: 0.20, 16: 0.10, 32: 0.40}
    for job, job_id in jobs:
        seconds = [centre[job.batch_size] * rng.uniform(0.98, 1.02) for _ in range(30)]
        fields = {8: {"contaminated": job.repeat}, 16: {"noisy": 1}}.get(job.batch_size, {})
        campaigns.add_run(db, cid, job_id, seconds, job.batch_size, fields=fields)


GOLDEN_VERDICTS = {
    # batch: (verdict, A flags, B flags) with flags refused, then allowed
    8: (("inconclusive (slower)", "", "contaminated"), ("slower", "", "contaminated")),
    16: (("inconclusive (faster)", "", "noisy"), ("faster", "", "noisy")),
    32: (("no significant change", "", ""), ("no significant change", "", "")),
}


def test_flagged_pairs_are_inconclusive(db_path: Path, campaigns: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    flagged_db(campaigns, db_path)
    for allowed, extra in ((0, []), (1, ["--allow-flagged"])):
        assert cli.main(["compare", "--db", str(db_path), "1", "3", "--format", "json",
                         *extra]) == 0
        doc = json.loads(capsys.readouterr().out)
        got = {r["batch"]: (r["verdict"], r["flags_a"], r["flags_b"]) for r in doc["rows"]}
        assert got == {b: v[allowed] for b, v in GOLDEN_VERDICTS.items()}
    rows = by_batch(compare.compare(connect(db_path, create=False), 1, 3))
    assert rows[8].inconclusive and not rows[8].regression
    assert rows[8].flagged_verdict == "slower" and rows[8].ratio is not None
    assert rows[8].ratio == pytest.approx(2.0, rel=0.03)  # the numbers are still shown
    # md: each side's flags beside the verdict
    assert cli.main(["compare", "--db", str(db_path), "1", "3"]) == 0
    md = capsys.readouterr().out
    assert "|  | contaminated | inconclusive (slower) |" in md
    assert "inconclusive: A or B is flagged" in md


def test_fail_on_regression_counts_conclusive_ones_only(
        db_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    flagged_db(campaigns, db_path)
    # the only slower pair is contaminated: the gate passes, and says why
    assert cli.main(["compare", "--db", str(db_path), "1", "3", "--fail-on-regression"]) == 0
    err = capsys.readouterr().err
    assert "no conclusive regression in campaign 3" in err
    assert "2 flagged pair(s) inconclusive, not counted" in err
    assert cli.main(["compare", "--db", str(db_path), "1", "3", "--fail-on-regression",
                     "--allow-flagged"]) == 1
    assert "1 configuration(s) conclusively slower in campaign 3" in capsys.readouterr().err


def test_metrics_without_a_value_are_not_comparable_and_say_why(
        db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compare A B --metric energy/mfu/ttft: a configuration whose cell has no value is
    not compared, with the cell's reason (issue 40: every metric --by compares)."""
    db = connect(db_path, create=False)
    for metric, why in (("energy", "n/a: not sampled"), ("mfu", "n/a: no FLOPs count"),
                        ("ttft", "n/a: training run"), ("tpot", "n/a: training run")):
        rows = by_batch(compare.compare(db, 1, 2, metric))
        assert rows[8].verdict == f"not comparable: A {why}", metric
        assert rows[8].ratio is None and rows[8].runs_a == 2
    assert cli.main(["compare", "--db", str(db_path), "1", "2", "--metric", "energy"]) == 0
    md = capsys.readouterr().out
    assert "B = campaign 2 `new`: J/sample" in md and "| A J/sample | B J/sample |" in md


def test_values_keep_four_significant_digits(tmp_path: Path, campaigns: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # 0.2320 beside 0.1611, not 0.232: a column of one precision, as the summary's
    db = connect(tmp_path / "d.db")
    for name, seconds in (("a", 0.25), ("b", 0.5)):
        cid, jobs = campaigns.create(db, campaigns.profile("p", ["cpu:1"], batch_sizes=(8,),
                                                           repeats=2), name)
        for _job, job_id in jobs:
            campaigns.add_run(db, cid, job_id, [seconds] * 10, 8)
    db.close()
    assert cli.main(["compare", "--db", str(tmp_path / "d.db"), "a", "b"]) == 0
    assert "| 0.2500 | 0.5000 | 2.000 |" in capsys.readouterr().out
