"""Telemetry writes: sample windows and the per-run summary (schema from migration 2).

``gpu_samples`` and ``host_samples`` hold downsampled windows (see
:mod:`dltop.telemetry.sampler`); the per-run summary goes into ``runs``
columns. Called from the engine's single writer thread.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import sqlite_utils

from dltop.store.migrations import RUN_TELEMETRY_COLUMNS
from dltop.store.tx import transaction
from dltop.telemetry.model import RunTelemetry

if TYPE_CHECKING:  # the viewer imports the store: not the sampler with it
    from dltop.telemetry.sampler import Batch

RUN_COLUMNS = RUN_TELEMETRY_COLUMNS
"""The ``runs`` columns a telemetry summary fills: the columns the migrations added for it
(a new one is declared once, in :mod:`dltop.store.migrations`)."""


class TelemetryWriter:
    """Telemetry tables of one connection (``Store.telemetry``)."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self._db = db

    def write_batch(self, batch: Batch) -> None:
        """Append one batch of downsampled windows (all of it, or none)."""
        with transaction(self._db):
            if batch.gpu:
                self._db.table("gpu_samples").insert_all(
                    ({**asdict(w), "simulated": int(w.simulated)} for w in batch.gpu),
                    batch_size=500)
            if batch.host:
                self._db.table("host_samples").insert_all((asdict(w) for w in batch.host),
                                                          batch_size=500)

    def write_run_telemetry(self, run_id: int, t: RunTelemetry) -> None:
        """Store a run's telemetry summary in its ``runs`` row."""
        values = {k: v for k, v in asdict(t).items() if k in RUN_COLUMNS}
        for key in ("contaminated", "telemetry_simulated"):
            if values[key] is not None:
                values[key] = int(values[key])
        with transaction(self._db):
            self._db.table("runs").update(run_id, values)
