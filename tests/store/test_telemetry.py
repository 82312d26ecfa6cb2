"""Telemetry writes: sample windows in batches, the run summary into its row."""

from __future__ import annotations

import pytest

from dltop.store import Store
from dltop.telemetry.model import RunTelemetry
from dltop.telemetry.sampler import Batch, GpuWindow, HostWindow

from .conftest import campaign


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
