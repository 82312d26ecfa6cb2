"""Telemetry tables (schema migration 2) and their writes.

``gpu_samples`` and ``host_samples`` hold downsampled windows (see
:mod:`dltop.telemetry.sampler`); the per-run summary goes into new ``runs``
columns. Called from the engine's single writer thread.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import sqlite_utils

from dltop.store.migrations import migration
from dltop.telemetry.model import RunTelemetry
from dltop.telemetry.sampler import Batch

_V2_RUN_COLUMNS: dict[str, type] = {
    "gpu_util_mean_pct": float, "gpu_util_peak_pct": float, "gpu_mem_peak_bytes": int,
    "gpu_mem_run_peak_bytes": int, "power_mean_w": float, "energy_j": float,
    "energy_source": str, "joules_per_sample": float, "host_cpu_mean_pct": float,
    "rss_peak_bytes": int, "throttle_reasons": str, "sm_clock_start_mhz": float,
    "sm_clock_end_mhz": float, "contaminated": int, "telemetry_simulated": int,
    "sampler_achieved_hz": float,
}
RUN_COLUMNS: dict[str, type] = {**_V2_RUN_COLUMNS, "telemetry_read_errors": int}  # v6 added it


@migration(2, "telemetry: gpu_samples, host_samples, per-run telemetry summary")
def _v2(db: Any) -> None:
    db["gpu_samples"].create(
        {"run_id": int, "t_start_mono_s": float, "gpu_index": int, "n": int,
         "util_mean_pct": float, "util_min_pct": float, "util_max_pct": float,
         "mem_used_max_bytes": int, "power_mean_w": float, "power_min_w": float,
         "power_max_w": float, "energy_j": float, "temperature_max_c": float,
         "sm_clock_mhz": float, "simulated": int},
    )
    db["gpu_samples"].create_index(["run_id"])
    db["host_samples"].create(
        {"run_id": int, "t_start_mono_s": float, "n": int, "cpu_mean_pct": float,
         "cpu_max_core_pct": float, "mem_used_bytes": int, "swap_used_bytes": int,
         "tree_cpu_pct": float, "tree_rss_bytes": int},
    )
    db["host_samples"].create_index(["run_id"])
    for name, kind in _V2_RUN_COLUMNS.items():  # frozen: later columns come from later migrations
        db["runs"].add_column(name, kind)


def write_batch(db: sqlite_utils.Database, batch: Batch) -> None:
    """Append one batch of downsampled windows."""
    with db.conn:
        if batch.gpu:
            db.table("gpu_samples").insert_all(
                ({**asdict(w), "simulated": int(w.simulated)} for w in batch.gpu),
                batch_size=500)
        if batch.host:
            db.table("host_samples").insert_all((asdict(w) for w in batch.host),
                                                batch_size=500)


def write_run_telemetry(db: sqlite_utils.Database, run_id: int, t: RunTelemetry) -> None:
    """Store a run's telemetry summary in its ``runs`` row."""
    values = {k: v for k, v in asdict(t).items() if k in RUN_COLUMNS}
    for key in ("contaminated", "telemetry_simulated"):
        if values[key] is not None:
            values[key] = int(values[key])
    with db.conn:
        db.table("runs").update(run_id, values)
