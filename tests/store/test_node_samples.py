"""Telemetry from every node (issue 15): agent windows stored per node, migration 16."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltop.store import Store, connect, memory_db
from dltop.store.migrations import MIGRATIONS
from dltop.telemetry.windows import GpuWindow, HostWindow

from .conftest import campaign
from .olddb import migrated_to

T0 = 1_800_000_000.0


def gpu(index: int, t: float, power: float, energy: float | None,
        mem: int = 1 << 30) -> GpuWindow:
    return GpuWindow(None, t - T0, index, 5, 50.0, 40.0, 60.0, mem, power, power, power,
                     energy, 60.0, 1400.0, True, t)


def host(t: float, cpu: float) -> HostWindow:
    return HostWindow(None, t - T0, 1, cpu, cpu, 1 << 30, 0, None, None, t, cpu, 0.0, 0.0)


def _run(store: Store) -> int:
    cid, jobs = campaign(store, 1)
    return store.start_run(jobs[0], cid, 1, "", 8)


def test_two_nodes_gpu_0_in_the_same_window_are_two_rows() -> None:
    store = Store(memory_db())
    run_id = _run(store)
    for node, power in (("node-a", 100.0), ("node-b", 300.0)):
        store.telemetry.add_agent_samples(run_id, node, [gpu(0, T0, power, None)],
                                          [host(T0, 10.0)])
    rows = list(store.db.query("select node, gpu_index, power_mean_w, run_id from gpu_samples "
                               "order by node"))
    assert rows == [{"node": "node-a", "gpu_index": 0, "power_mean_w": 100.0, "run_id": run_id},
                    {"node": "node-b", "gpu_index": 0, "power_mean_w": 300.0, "run_id": run_id}]
    assert [r["node"] for r in store.db.query("select node from host_samples order by node")] \
        == ["node-a", "node-b"]


def test_a_local_batch_stays_untagged() -> None:
    from dltop.telemetry.windows import Batch

    store = Store(memory_db())
    run_id = _run(store)
    store.telemetry.write_batch(Batch((gpu(0, T0, 100.0, None),), ()))
    store.db.execute("update gpu_samples set run_id = ?", [run_id])
    assert [r["node"] for r in store.db.query("select node from gpu_samples")] == [None]


def test_the_summary_covers_every_node_over_the_measured_window() -> None:
    store = Store(memory_db())
    run_id = _run(store)
    # one warm-up step ending at T0+1, measured steps ending at T0+2 .. T0+11
    store.add_iterations(run_id, [
        {"idx": i, "seconds": 1.0, "samples": 8, "warmup": int(i == 0), "loss": None,
         "t_mono_ns": None, "t_wall_s": T0 + 1 + i} for i in range(11)])
    for node, power, mem in (("node-a", 100.0, 2 << 30), ("node-b", 300.0, 5 << 30)):
        # counters: 100 J/s and 300 J/s; a window before the measured one is left out
        windows = [gpu(0, T0 + k * 0.5, power, power * k * 0.5,
                       mem=(9 << 30) if k == 0 else mem) for k in range(0, 25)]
        store.telemetry.add_agent_samples(run_id, node, windows,
                                          [host(T0 + 2.0, 20.0 if node == "node-a" else 40.0)])
    summary = store.telemetry.finish_node_run(run_id, samples=80)
    assert summary.window_s == pytest.approx(10.0)
    assert summary.power_mean_w == pytest.approx(400.0)  # 100 W + 300 W
    assert summary.energy_j == pytest.approx(4000.0)  # 10 s x 400 W, from the counters
    assert summary.energy_source == "counter"
    assert summary.joules_per_sample == pytest.approx(50.0)
    assert summary.gpu_mem_peak_bytes == 5 << 30  # the 9 GiB window is before the window
    assert summary.host_cpu_mean_pct == pytest.approx(30.0)
    assert summary.telemetry_simulated is True
    row = next(store.db.query("select power_mean_w, energy_j, window_s from runs where id = ?",
                              [run_id]))
    assert row == {"power_mean_w": pytest.approx(400.0), "energy_j": pytest.approx(4000.0),
                   "window_s": pytest.approx(10.0)}


def test_without_measured_iterations_the_summary_says_why() -> None:
    store = Store(memory_db())
    run_id = _run(store)
    store.telemetry.add_agent_samples(run_id, "n1", [gpu(0, T0, 100.0, 0.0)], [])
    summary = store.telemetry.finish_node_run(run_id, samples=None)
    assert summary.power_mean_w is None
    assert summary.telemetry_note is not None and "no measured" in summary.telemetry_note


def _version_15(path: Path) -> None:
    """A database left by dltop before migration 16, with a run and its samples."""
    db = migrated_to(path, 15)
    db.execute("insert into gpu_samples (run_id, t_start_mono_s, gpu_index, n, power_mean_w) "
               "values (1, 5.0, 0, 5, 123.0)")
    db.execute("insert into host_samples (run_id, t_start_mono_s, n, cpu_mean_pct) "
               "values (1, 5.0, 1, 12.0)")
    db.conn.commit()
    db.close()


def test_migration_16_keeps_the_rows_of_an_older_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_15(path)
    db = connect(path)
    assert MIGRATIONS[15].version == 16
    assert list(db.query("select run_id, gpu_index, power_mean_w, node from gpu_samples")) \
        == [{"run_id": 1, "gpu_index": 0, "power_mean_w": 123.0, "node": None}]
    assert list(db.query("select cpu_mean_pct, node from host_samples")) \
        == [{"cpu_mean_pct": 12.0, "node": None}]
    assert 16 in {r["version"] for r in db.query("select version from schema_migrations")}
