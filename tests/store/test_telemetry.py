"""Telemetry writes: sample windows in batches, the run summary into its row."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from dltop.jobs.collector import IterationCollector
from dltop.store import Store
from dltop.telemetry.clock import anchor
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler
from dltop.telemetry.values import RunTelemetry
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

from .conftest import campaign, make_jobs


def gpu(run_id: int | None, t: float, index: int) -> GpuWindow:
    return GpuWindow(run_id, t, index, 5, 50.0, 10.0, 90.0, 1 << 30, 100.0, 80.0, 120.0, 10.0,
                     60.0, 1500.0, True)


def host(run_id: int | None, t: float) -> HostWindow:
    return HostWindow(run_id, t, 5, 20.0, 80.0, 1 << 32, 0, 150.0, 1 << 28)


def test_write_batch_appends_every_window(store: Store) -> None:
    store.telemetry.write_batch(Batch((gpu(7, 0.0, 0), gpu(7, 0.0, 1)), (host(7, 0.0),)))
    store.telemetry.write_batch(Batch((), (host(None, 0.5),)))
    store.telemetry.write_batch(Batch((), ()))
    rows = list(store.db.query("select run_id, gpu_index, simulated, util_max_pct "
                               "from gpu_samples order by gpu_index"))
    assert rows == [{"run_id": 7, "gpu_index": 0, "simulated": 1, "util_max_pct": 90.0},
                    {"run_id": 7, "gpu_index": 1, "simulated": 1, "util_max_pct": 90.0}]
    assert [(r["run_id"], r["tree_rss_bytes"]) for r in store.db.query(
        "select run_id, tree_rss_bytes from host_samples order by t_start_mono_s")] == [
        (7, 1 << 28), (None, 1 << 28)]


def test_write_batch_is_all_or_nothing(store: Store) -> None:
    bad = Batch((gpu(7, 0.0, 0),), (host(7, 0.0), "not a window"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.telemetry.write_batch(bad)
    assert next(store.db.query("select count(*) as n from gpu_samples"))["n"] == 0


def test_write_run_telemetry_fills_the_runs_row(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    t = RunTelemetry(energy_j=12.5, energy_source="counter", contaminated=True)
    store.telemetry.write_run_telemetry(run, t)
    row = store.db.table("runs").get(run)
    assert (row["energy_j"], row["energy_source"], row["contaminated"],
            row["telemetry_simulated"], row["status"]) == (12.5, "counter", 1, 0, "running")


def test_telemetry_rows_carry_their_wall_clock_anchor(store: Store) -> None:
    batches: list[Batch] = []
    sampler = Sampler(FakeGpuBackend(1), batches.append, gpu_hz=10, host_hz=10,
                      window_s=0.0, flush_s=0.0)
    before = time.time()
    sampler.tick()
    sampler.tick()
    sampler.stop()
    after = time.time()
    for b in batches:
        store.telemetry.write_batch(b)
    for table in ("gpu_samples", "host_samples"):
        rows = list(store.db.query(f"select t_start_mono_s, t_wall_s from {table}"))
        assert rows, table
        for r in rows:  # the wall time of the window's monotonic start, from one anchor
            assert before - 0.01 <= r["t_wall_s"] <= after + 0.01
            assert r["t_wall_s"] - r["t_start_mono_s"] == pytest.approx(
                anchor().wall_s - anchor().mono_ns / 1e9, abs=1e-3)


def test_iteration_rows_carry_both_timestamps(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    spec = make_jobs(1)[0]
    ends: list[tuple[int, float, bool]] = []
    writes: list[tuple[Callable[..., None], tuple[object, ...]]] = []
    collector = IterationCollector(run, spec, lambda e: None, store,
                                   lambda fn, *a, **_: writes.append((fn, a)),
                                   on_iteration=lambda t, s, w: ends.append((t, s, w)))
    now_ns = time.monotonic_ns()
    collector.on_event({"event": "iter", "index": 0, "seconds": 0.5, "warmup": True,
                        "t_mono_ns": now_ns - 10**9})
    collector.on_event({"event": "iter", "index": 1, "seconds": 0.25, "samples": 3,
                        "t_mono_ns": now_ns})
    collector.on_event({"event": "iter", "index": 2, "seconds": 0.25})  # an old runner
    collector.flush()
    for fn, args in writes:
        fn(*args)
    rows = list(store.db.query("select idx, t_mono_ns, t_wall_s from iterations "
                               "where run_id = ? order by idx", [run]))
    assert [r["t_mono_ns"] for r in rows[:2]] == [now_ns - 10**9, now_ns]
    assert rows[2]["t_mono_ns"] >= now_ns  # when it arrived
    for r in rows:
        assert r["t_wall_s"] == pytest.approx(anchor().wall(r["t_mono_ns"]), abs=1e-6)
    assert rows[1]["t_wall_s"] - rows[0]["t_wall_s"] == pytest.approx(1.0, abs=1e-6)
    assert abs(rows[1]["t_wall_s"] - time.time()) < 5
    assert [(t, w) for t, _, w in ends[:2]] == [(now_ns - 10**9, True), (now_ns, False)]
    assert (collector.measured_samples, collector.samples_seen) == (3 + spec.samples_per_iter,
                                                                    3 + 2 * spec.samples_per_iter)


def test_window_and_contamination_columns_are_stored(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    store.telemetry.write_run_telemetry(run, RunTelemetry(
        contaminated=True, contamination="cpu: 35% of CPU 0 used by other processes",
        cpu_foreign_pct=35.0, window_s=6.0, energy_run_j=1500.0))
    row = store.db.table("runs").get(run)
    assert (row["contaminated"], row["contamination"], row["cpu_foreign_pct"],
            row["window_s"], row["energy_run_j"], row["telemetry_note"]) == (
        1, "cpu: 35% of CPU 0 used by other processes", 35.0, 6.0, 1500.0, None)


def test_host_cpu_split_is_stored_in_windows_and_the_run_summary(store: Store) -> None:
    cols = {c.name: c.type for c in store.db["host_samples"].columns}
    assert (cols["cpu_user_pct"], cols["cpu_system_pct"], cols["cpu_iowait_pct"]) == (
        "REAL",) * 3
    w = HostWindow(7, 0.0, 5, 20.0, 80.0, 1 << 32, 0, 150.0, 1 << 28, None, 12.5, 4.0, 0.75)
    store.telemetry.write_batch(Batch((), (w, host(None, 0.5))))
    assert [tuple(r.values()) for r in store.db.query(
        "select cpu_user_pct, cpu_system_pct, cpu_iowait_pct from host_samples "
        "order by t_start_mono_s")] == [(12.5, 4.0, 0.75), (None, None, None)]
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    store.telemetry.write_run_telemetry(run, RunTelemetry(
        host_cpu_user_pct=31.5, host_cpu_system_pct=6.25, host_cpu_iowait_pct=None))
    row = store.db.table("runs").get(run)
    assert (row["host_cpu_user_pct"], row["host_cpu_system_pct"],
            row["host_cpu_iowait_pct"]) == (31.5, 6.25, None)


def test_environment_records_the_driver_version(store: Store) -> None:
    assert store.db["environment"].columns_dict["driver_version"] is str
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    store.record_environment(run, {"host": "h", "driver_version": "550.54.15"})
    assert store.db.table("environment").get(run)["driver_version"] == "550.54.15"
