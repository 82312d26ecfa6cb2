"""``dltop compare CAMPAIGN --by SETTING`` (issue 40): pairs inside one campaign, and the
one statistics policy (single runs inconclusive unless ``--within-run``)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.results import abtest
from dltop.store import Store, connect
from dltop.store.generations import pack_seconds

MATRIX = """
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = {batches}
devices = ["cpu:1"]
precision = "{precision}"
"""


def sweep(campaigns: Any, path: Path, centre: dict[tuple[str, int], float],
          repeats: int = 3, name: str = "sweep", seed: int = 0) -> int:
    """A campaign sweeping precision and batch; each run 30 iterations around
    ``centre[(precision, batch)]`` s (±2 %)."""
    db = connect(path)
    matrices = {}
    for precision, batch in centre:
        matrices.setdefault(precision, []).append(batch)
    profile = f"[defaults]\nrepeats = {repeats}\n" + "".join(
        MATRIX.format(batches=batches, precision=p) for p, batches in matrices.items())
    cid, jobs = campaigns.create(db, profile, name)
    rng = random.Random(seed)
    for job, job_id in jobs:
        c = centre[(job.precision, job.batch_size)]
        campaigns.add_run(db, cid, job_id, [c * rng.uniform(0.98, 1.02) for _ in range(30)],
                          job.batch_size)
    return cid


# bf16 halves batch 8's time and leaves batch 16's as it is
CENTRE = {("fp32", 8): 0.10, ("fp32", 16): 0.20, ("bf16", 8): 0.05, ("bf16", 16): 0.20}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main(["compare", *argv, "--format", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_by_precision_pairs_each_batch(tmp_path: Path, campaigns: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.db"
    sweep(campaigns, path, CENTRE)
    doc = run_json(capsys, "--db", str(path), "1", "--by", "precision")
    got = {(r["batch"], r["metric"]): r for r in doc["rows"]}
    # training runs without readings: time and throughput only (no energy, MFU, TTFT)
    assert set(got) == {(8, "time"), (8, "throughput"), (16, "time"), (16, "throughput")}
    assert all((r["a_setting"], r["b_setting"]) == ("fp32", "bf16") for r in doc["rows"])
    assert doc["baseline"] == "fp32" and doc["by"] == "precision"
    t8, t16 = got[(8, "time")], got[(16, "time")]
    assert t8["ratio"] == pytest.approx(0.5, rel=0.03) and t8["verdict"] == "faster"
    assert t8["ci_low"] < t8["ratio"] < t8["ci_high"] < 1.0
    assert t8["runs"] == {"a": 3, "b": 3} and t8["interval"] == "across repeats"
    assert t16["ratio"] == pytest.approx(1.0, rel=0.03)
    assert t16["verdict"] == "no significant change"
    thr = got[(8, "throughput")]
    assert thr["ratio"] == pytest.approx(2.0, rel=0.03) and thr["verdict"] == "faster"
    # the markdown names the setting's two values and the metric on each row
    assert cli.main(["compare", "--db", str(path), "1", "--by", "precision"]) == 0
    md = capsys.readouterr().out
    assert "| A precision | B precision | metric |" in md
    assert "| fp32 | bf16 | time | s |" in md and "Pairs: configurations that differ only" in md
    # --baseline turns it round; the gate counts the conclusive regression
    doc = run_json(capsys, "--db", str(path), "1", "--by", "precision", "--baseline", "bf16",
                   "--metric", "time")
    (row,) = [r for r in doc["rows"] if r["batch"] == 8]
    assert row["ratio"] == pytest.approx(2.0, rel=0.03) and row["verdict"] == "slower"
    assert cli.main(["compare", "--db", str(path), "1", "--by", "precision", "--baseline",
                     "bf16", "--fail-on-regression"]) == 1
    assert "conclusively slower" in capsys.readouterr().err


def test_by_batch_with_more_values_compares_each_with_the_baseline(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.db"
    sweep(campaigns, path, {("fp32", 8): 0.1, ("fp32", 16): 0.2, ("fp32", 32): 0.4})
    doc = run_json(capsys, "--db", str(path), "latest", "--by", "batch", "--metric", "time")
    assert [(r["a_setting"], r["b_setting"]) for r in doc["rows"]] == [(8, 16), (8, 32)]
    assert [r["ratio"] for r in doc["rows"]] == pytest.approx([2.0, 4.0], rel=0.03)
    doc = run_json(capsys, "--db", str(path), "1", "--by", "batch_size", "--baseline", "16",
                   "--metric", "time")
    assert [(r["a_setting"], r["b_setting"]) for r in doc["rows"]] == [(16, 8), (16, 32)]


def test_by_a_setting_that_does_not_vary_or_never_alone_exits_2(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v.db"
    sweep(campaigns, path, CENTRE)
    for by in ("framework", "compile", "cuda_graphs"):
        assert cli.main(["compare", "--db", str(path), "1", "--by", by]) == 2, by
        err = capsys.readouterr()
        assert "does not vary in campaign 1" in err.err and err.out == ""
        assert "the settings that vary: batch_size, precision" in err.err
        assert "Traceback" not in err.err
    # precision and batch change together in every pair: confounded
    sweep(campaigns, path, {("fp32", 8): 0.1, ("bf16", 16): 0.1}, name="confounded")
    assert cli.main(["compare", "--db", str(path), "2", "--by", "precision"]) == 2
    err = capsys.readouterr().err
    assert "precision never varies alone in campaign 2" in err
    assert "differs in batch_size too" in err
    assert "the settings that vary: batch_size, precision" in err
    # a baseline that is no value of the setting
    assert cli.main(["compare", "--db", str(path), "1", "--by", "precision", "--baseline",
                     "fp8"]) == 2
    assert "not a value of precision in the campaign; its values: fp32, bf16" in \
        capsys.readouterr().err
    # --by with B, --baseline without --by, neither B nor --by
    for argv, words in ((["1", "2", "--by", "precision"], "give CAMPAIGN only"),
                        (["1", "2", "--baseline", "fp32"], "give --by too"),
                        (["1"], "compare needs B")):
        assert cli.main(["compare", "--db", str(path), *argv]) == 2, argv
        assert words in capsys.readouterr().err


def test_single_runs_are_inconclusive_unless_within_run(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's disagreement: the summary gave one run "n/a: one run" while compare
    gave the same run a bootstrap interval. Now both say so, and --within-run gives the
    iteration bootstrap labelled within-run."""
    path = tmp_path / "one.db"
    sweep(campaigns, path, CENTRE, repeats=1)
    doc = run_json(capsys, "--db", str(path), "1", "--by", "precision", "--metric", "time")
    row = next(r for r in doc["rows"] if r["batch"] == 8)
    assert row["verdict"] == "inconclusive: one run" and row["ratio"] == pytest.approx(
        0.5, rel=0.03)
    assert row["ci_low"] is None and row["interval"] is None
    assert cli.main(["compare", "--db", str(path), "1", "--by", "precision", "--metric",
                     "time"]) == 0
    md = capsys.readouterr().out
    # every row's interval is n/a for one reason: the columns are named once, not shown
    assert "not shown, n/a in every row: CI95 low, CI95 high (one run)" in md
    assert "| CI95 low |" not in md and "--within-run gives one" in md
    assert cli.main(["export", "--db", str(path), "--table", "summary", "--format",
                     "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {r["reasons"]["ci_low_s"] for r in summary["rows"]} == {"n/a: one run"}
    # asked for: the within-run interval, labelled so in the verdict, the JSON and a note
    doc = run_json(capsys, "--db", str(path), "1", "--by", "precision", "--metric", "time",
                   "--within-run")
    row = next(r for r in doc["rows"] if r["batch"] == 8)
    assert row["verdict"] == "faster (within-run)" and row["interval"] == "within-run"
    assert row["ci_low"] < row["ratio"] < row["ci_high"]
    assert cli.main(["compare", "--db", str(path), "1", "--by", "precision", "--metric",
                     "time", "--within-run"]) == 0
    md = capsys.readouterr().out
    assert "| faster (within-run) |" in md and "(within-run): A or B has a single ok run" in md
    # the gate does not count single runs, and says so
    assert cli.main(["compare", "--db", str(path), "1", "--by", "precision", "--baseline",
                     "bf16", "--fail-on-regression"]) == 0
    assert "pair(s) with a single run inconclusive, not counted" in capsys.readouterr().err


GENERATE = """
[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [1]
devices = ["cpu:1"]
mode = "generate"
prompt_tokens = 16
new_tokens = 5
cuda_graphs = {graphs}
"""


def test_by_cuda_graphs_gives_ttft_and_tpot(tmp_path: Path, campaigns: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Generation pairs: TTFT and TPOT ratios from each run's median request, with
    tokens/s for throughput; CUDA graphs halve the decode step here."""
    path = tmp_path / "g.db"
    db = connect(path)
    # CUDA graphs first in the queue: the baseline is still the default, off
    profile = "[defaults]\nrepeats = 2\n" + GENERATE.format(graphs="true") + \
        GENERATE.format(graphs="false")
    cid, jobs = campaigns.create(db, profile, "graphs")
    rng = random.Random(5)
    store = Store(db)
    for job, job_id in jobs:
        step = 0.002 if job.cuda_graphs else 0.004
        reqs = []
        for _ in range(12):
            ttft = 0.010 * rng.uniform(0.98, 1.02)
            itl = [step * rng.uniform(0.98, 1.02) for _ in range(4)]
            reqs.append((ttft, itl))
        run_id = campaigns.add_run(db, cid, job_id, [t + sum(x) for t, x in reqs], 5)
        store.add_generations(run_id, [
            {"idx": i, "warmup": 0, "ttft_s": t, "e2e_s": t + sum(x), "prompt_tokens": 16,
             "new_tokens": 5, "batch": 1, "itl_s": pack_seconds(x)}
            for i, (t, x) in enumerate(reqs)])
    db.close()
    doc = run_json(capsys, "--db", str(path), "graphs", "--by", "cuda_graphs")
    got = {r["metric"]: r for r in doc["rows"]}
    assert set(got) == {"time", "throughput", "ttft", "tpot"}
    assert got["tpot"]["ratio"] == pytest.approx(0.5, rel=0.03)
    assert got["tpot"]["verdict"] == "faster"
    assert got["ttft"]["verdict"] == "no significant change"
    assert got["throughput"]["unit"] == "tokens/s" and got["throughput"]["verdict"] == "faster"
    assert (got["ttft"]["a_setting"], got["ttft"]["b_setting"]) == (False, True)
    assert doc["baseline"] is False and doc["values"] == [True, False]


def test_setting_names() -> None:
    assert abtest.setting_name("compile") == "torch_compile"
    assert abtest.setting_name("batch") == "batch_size"
    assert abtest.setting_name("cuda-graphs") == "cuda_graphs"
    assert abtest.setting_name("xla") == "xla"


def test_by_a_base_key_framework(tmp_path: Path, campaigns: Any,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A row key of every table (framework, model, batch, device) as the setting: its
    column becomes A/B, the rest of the table as for any setting."""
    path = tmp_path / "f.db"
    db = connect(path)
    profile = ('[defaults]\nrepeats = 2\n[[matrix]]\nframeworks = ["torch", "jax"]\n'
               'models = ["fcn-r"]\nbatch_sizes = [8]\ndevices = ["cpu:1"]\n')
    cid, jobs = campaigns.create(db, profile, "fw")
    for job, job_id in jobs:
        campaigns.add_run(db, cid, job_id, [0.1 if job.framework == "torch" else 0.3] * 5)
    db.close()
    doc = run_json(capsys, "--db", str(path), "fw", "--by", "framework", "--metric", "time")
    (row,) = doc["rows"]
    assert (row["a_setting"], row["b_setting"]) == ("torch", "jax") and "framework" not in row
    assert row["ratio"] == pytest.approx(3.0) and row["verdict"] == "slower"
