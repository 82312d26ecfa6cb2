"""`dltop prune` keeps exports byte-identical: every table, metric and format (and the
`dltop runs` listing), before and after the raw rows (iterations, GPU and host
samples) and run folders go."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from dltop.catalog import CampaignStatus, RunStatus
from dltop.cli import main
from dltop.results.export import METRICS
from dltop.store import Store, connect

pytestmark = pytest.mark.slow  # every export in every format, before and after a prune

FORMATS = ("md", "csv", "json", "latex")


def _samples(db: sqlite_utils.Database, run_id: int, gpu: bool, simulated: bool,
             rng: random.Random) -> None:
    """Telemetry windows of a run, written as the sampler stores them."""
    for k in range(6):
        db["host_samples"].insert({"run_id": run_id, "t_start_mono_s": k * 0.5,
                                   "t_wall_s": 1.7e9 + k, "n": 5, "cpu_mean_pct": 50.0,
                                   "tree_cpu_pct": rng.uniform(90, 110), "tree_rss_bytes": 1})
        if gpu:
            db["gpu_samples"].insert({"run_id": run_id, "t_start_mono_s": k * 0.5,
                                      "t_wall_s": 1.7e9 + k, "gpu_index": 0, "n": 5,
                                      "util_mean_pct": 90.0, "power_mean_w": 250.0,
                                      "simulated": int(simulated)})


def _campaign(db: sqlite_utils.Database, campaigns: Any, name: str, seed: int,
              simulated: bool) -> int:
    rng = random.Random(seed)
    profile = campaigns.profile(name, ["cpu:1", "cpu:2", "cpu:4", "gpu:1"],
                                batch_sizes=(8, 16), repeats=2)
    cid, jobs = campaigns.create(db, profile, name)
    for k, (job, job_id) in enumerate(jobs):
        gpu = job.device.label.startswith("gpu")
        if k == 3:
            continue  # never ran: stays queued
        status = RunStatus.OOM if k == 5 else RunStatus.OK
        base = 0.01 * job.batch_size / job.device.count
        its = [(rng.gauss(base, base / 10), job.batch_size, int(i < 3)) for i in range(25)]
        fields = {"device_name": "NVIDIA H100 80GB HBM3" if gpu else None,
                  "flops_per_sample": 3e9, "rss_peak_bytes": 2**30,
                  "host_cpu_mean_pct": 40.0, "power_mean_w": 300.0 if gpu else None,
                  "joules_per_sample": 0.5 if gpu else None,
                  # a run stored before runs.tree_cpu_mean_pct: exports average every
                  # host sample of the run instead
                  "tree_cpu_mean_pct": None if k % 2 else 97.5,
                  "telemetry_simulated": int(simulated) if gpu else None}
        run_id = campaigns.add_run(db, cid, job_id, its, job.batch_size, status=status,
                                   fields=fields)
        _samples(db, run_id, gpu, simulated, rng)
    Store(db).set_campaign_status(cid, CampaignStatus.FINISHED)
    return cid


def _exports(db_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    out = {}
    argv_sets = [["export", "--campaign", ref, "--table", "pivot", "--metric", m, "--format", f]
                 for ref in ("1", "2", "1,2") for m in METRICS for f in FORMATS]
    argv_sets += [["export", "--campaign", ref, "--table", t, "--format", f]
                  for ref in ("1", "1,2") for t in ("summary", "scaling") for f in FORMATS]
    argv_sets += [["compare", "1", "2", "--metric", m, "--format", f]
                  for m in ("time", "throughput") for f in FORMATS]
    argv_sets += [["runs", "--limit", "100"], ["runs", "--campaign", "1"]]
    for argv in argv_sets:
        assert main([*argv, "--db", str(db_path)]) == 0, argv
        out[" ".join(argv)] = capsys.readouterr().out
    return out


def test_exports_are_identical_after_prune(tmp_path: Path, campaigns: Any,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "d.db"
    db = connect(db_path)
    _campaign(db, campaigns, "base", 1, simulated=True)
    _campaign(db, campaigns, "new", 2, simulated=False)
    runs_dir = tmp_path / "d-runs"
    for rid in (1, 2, 99):
        (runs_dir / f"run-{rid}").mkdir(parents=True)
        (runs_dir / f"run-{rid}" / "runner.log").write_text("x" * 1000)
    before = _exports(db_path, capsys)
    raw = {t: db[t].count for t in ("iterations", "gpu_samples", "host_samples")}
    assert all(raw.values())

    assert main(["prune", "--db", str(db_path), "--campaign", "all", "--yes"]) == 0
    said = capsys.readouterr().out
    assert f"{raw['iterations']:,} iterations" in said

    db = sqlite_utils.Database(db_path)
    assert {t: db[t].count for t in raw} == {t: 0 for t in raw}
    assert db["run_archive"].count == db["runs"].count
    assert not (runs_dir / "run-1").exists() and not (runs_dir / "run-2").exists()
    assert (runs_dir / "run-99").exists()  # no such run in this database: not ours to delete
    after = _exports(db_path, capsys)
    assert before.keys() == after.keys()
    for key in before:
        assert after[key] == before[key], key
    # the exports really depend on what was archived (not trivially equal)
    assert "simulated" in before["export --campaign 1 --table pivot --metric power --format md"]
