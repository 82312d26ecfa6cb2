"""A run over time (results/runtrace.py): iterations and telemetry on one axis."""

from __future__ import annotations

import math

import sqlite_utils

from dltop.catalog import CampaignStatus
from dltop.results.runtrace import read_trace
from dltop.store import Store, migrations
from dltop.store.retention import Retention
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

from .conftest import CampaignMaker

T0 = 1000.0  # monotonic seconds of the run's first step start


def _db() -> sqlite_utils.Database:
    db = sqlite_utils.Database(memory=True)
    migrations.apply(db)
    return db


def _run(db: sqlite_utils.Database, campaigns: type[CampaignMaker], n: int = 20) -> int:
    cid, jobs = campaigns.create(db, campaigns.profile("p", ["cpu:1"]))
    run_id = campaigns.add_run(db, cid, jobs[0][1], [], iterations=False)
    Store(db).set_campaign_status(cid, CampaignStatus.FINISHED)
    rows = [{"idx": i, "seconds": 0.5, "samples": 8, "warmup": int(i < 4),
             "loss": None if i == n - 1 else 2.0 - i / n,
             "t_mono_ns": int((T0 + 0.5 * (i + 1)) * 1e9), "t_wall_s": None}
            for i in range(n)]
    store = Store(db)
    store.add_iterations(run_id, rows)
    store.telemetry.write_batch(Batch(
        tuple(GpuWindow(run_id, T0 - 0.25 + t, g, 5, 50.0 + g, 10.0, 90.0, 1 << 30, 100.0,
                        80.0, 120.0, 10.0, 60.0, 1500.0, g == 1)
              for t in range(n // 2) for g in (0, 1)),
        tuple(HostWindow(run_id, T0 + t, 5, 20.0, 80.0, 1 << 32, 0, 150.0, 1 << 28)
              for t in range(n // 2))))
    return run_id


def test_one_axis_from_the_earliest_point(campaigns: type[CampaignMaker]) -> None:
    db = _db()
    run_id = _run(db, campaigns)
    trace = read_trace(db, run_id)
    # the first GPU window starts 0.25 s before the first step: it is the origin
    assert trace.gpus[0].points[0].t_s == 0.0
    assert math.isclose(trace.iterations[0].t_end_s or 0, 0.75)
    assert math.isclose(trace.host[0].t_s, 0.25)
    assert math.isclose(trace.warmup_end_s or 0, 0.25 + 0.5 * 4)
    assert [s.gpu_index for s in trace.gpus] == [0, 1]
    assert [s.simulated for s in trace.gpus] == [False, True]
    assert trace.gpus[1].points[0].util_pct == 51.0
    assert trace.has_loss and trace.iterations[-1].loss is None
    assert math.isclose(trace.iterations[1].loss or 0, 1.95)
    assert trace.n_iterations == 20 and trace.thinned_every == 1 and not trace.pruned
    assert [p.warmup for p in trace.iterations[:5]] == [True] * 4 + [False]


def test_long_runs_are_thinned_with_the_last_step_kept(
        campaigns: type[CampaignMaker]) -> None:
    db = _db()
    run_id = _run(db, campaigns, n=1001)
    trace = read_trace(db, run_id, max_points=100)
    assert trace.thinned_every == 11 and trace.n_iterations == 1001
    assert len(trace.iterations) <= 101
    assert trace.iterations[-1].idx == 1000
    assert math.isclose(trace.warmup_end_s or 0, 0.25 + 0.5 * 4)  # not from thinned rows
    assert len(trace.host) <= 100 and len(trace.gpus[0].points) <= 800


def test_a_pruned_run_keeps_its_measured_seconds(campaigns: type[CampaignMaker]) -> None:
    db = _db()
    run_id = _run(db, campaigns)
    Retention(db).prune_run(run_id)
    trace = read_trace(db, run_id)
    assert trace.pruned and trace.gpus == () and trace.host == ()
    assert len(trace.iterations) == 16 and trace.iterations[0].t_end_s is None
    assert trace.n_iterations == 16 and not any(p.warmup for p in trace.iterations)


def test_a_run_without_rows_is_empty(campaigns: type[CampaignMaker]) -> None:
    db = _db()
    cid, jobs = campaigns.create(db, campaigns.profile("p", ["cpu:1"]))
    run_id = campaigns.add_run(db, cid, jobs[0][1], [], iterations=False)
    trace = read_trace(db, run_id)
    assert trace.iterations == () and trace.gpus == () and trace.host == ()
    assert trace.duration_s is None and trace.warmup_end_s is None and not trace.has_loss
