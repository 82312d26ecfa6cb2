"""Telemetry writes: sample windows and the per-run summary (schema from migration 2).

``gpu_samples`` and ``host_samples`` hold downsampled windows (see
:mod:`dltop.telemetry.sampler`); the per-run summary goes into ``runs``
columns. Called from the engine's single writer thread.

A Slurm run's windows come from the agent of each of its nodes
(:mod:`dltop.telemetry.agent`, read by :mod:`dltop.jobs.agentfeed`) and are stored
with the node's name in ``node`` (migration 16; NULL: the engine's own host);
:meth:`TelemetryWriter.finish_node_run` computes such a run's summary from them
(:mod:`dltop.telemetry.nodestats`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, fields
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import sqlite_utils

from dltop.store import samples as sample_tables
from dltop.store.rows import insert_sql
from dltop.store.schema_steps import RUN_TELEMETRY_COLUMNS
from dltop.store.serving import IDLE_COLUMNS
from dltop.store.tx import transaction
from dltop.telemetry.nodestats import (
    NodeGpuRow,
    NodeHostRow,
    measured_window,
    summarize,
)
from dltop.telemetry.values import RunTelemetry

if TYPE_CHECKING:  # the viewer imports the store: not the sampler with it
    from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

RUN_COLUMNS = {**RUN_TELEMETRY_COLUMNS, **IDLE_COLUMNS}
"""The ``runs`` columns a telemetry summary fills: the columns the migrations added for it
(a new one is declared once, in :mod:`dltop.store.migrations`)."""


def _values(windows: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """Each window's field values, in field order, for one ``executemany``.

    Read straight off the frozen dataclass's ``__dict__`` by field name, one C call
    per row (no ``asdict`` copy, no sqlite-utils schema reads). Booleans are stored
    as 0/1 by sqlite3. A row that is not such a window raises ``TypeError`` or
    ``KeyError`` as the statement reads it, and the batch rolls back.
    """
    return map(_getter(type(windows[0])), map(vars, windows))


def _getter(kind: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    got = _GETTERS.get(kind)
    if got is None:
        got = _GETTERS[kind] = itemgetter(*(f.name for f in fields(kind)))
    return got


_GETTERS: dict[type[Any], Callable[[Any], tuple[Any, ...]]] = {}


class TelemetryWriter:
    """Telemetry tables of one connection (``Store.telemetry``)."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self._db = db
        self._inserts: dict[type[Any], str] = {}

    def write_batch(self, batch: Batch) -> None:
        """Append one batch of downsampled windows (all of it, or none)."""
        if not batch.gpu and not batch.host:
            return
        with transaction(self._db):
            for table, windows in (("gpu_samples", batch.gpu), ("host_samples", batch.host)):
                if windows:
                    # a list first: building the rows apart from the inserts is faster
                    # than feeding executemany an iterator (measured, store_ingest.py)
                    self._db.conn.executemany(self._insert(table, type(windows[0])),
                                              list(_values(windows)))

    def add_agent_samples(self, run_id: int, node: str, gpu: Sequence[GpuWindow],
                          host: Sequence[HostWindow]) -> None:
        """Append one node's windows to ``run_id``, tagged with the node (all, or none).

        The windows' own ``run_id`` is ignored (an agent attributes nothing to a run).
        """
        if not gpu and not host:
            return
        with transaction(self._db):
            for table, windows in (("gpu_samples", gpu), ("host_samples", host)):
                if not windows:
                    continue
                names = [f.name for f in fields(type(windows[0]))]
                sql = insert_sql(table, [*names, "node"])
                at = names.index("run_id")
                self._db.conn.executemany(sql, [
                    (*row[:at], run_id, *row[at + 1:], node) for row in _values(windows)])

    def finish_node_run(self, run_id: int, samples: int | None) -> RunTelemetry:
        """Summarise a multi-node run from its nodes' stored windows, and store it.

        The measured window comes from the run's iterations (their wall times); see
        :mod:`dltop.telemetry.nodestats`. Rows of the engine's own host (``node`` NULL)
        are not part of it.

        Args:
            run_id: the run, ended, its agents' files drained.
            samples: training samples of the measured iterations (joules per sample).
        """
        q = self._db.conn.execute
        iters = [(t, s, bool(w)) for t, s, w in q(
            "select t_wall_s, seconds, warmup from iterations where run_id = ?", [run_id])]
        gpu_rows, host_rows = sample_tables.node_windows(self._db.conn, run_id)
        gpu = [NodeGpuRow(*r) for r in gpu_rows]
        host = [NodeHostRow(*r) for r in host_rows]
        summary = summarize(gpu, host, measured_window(iters), samples)
        self.write_run_telemetry(run_id, summary)
        return summary

    def _insert(self, table: str, kind: type[Any]) -> str:
        """The table's INSERT for windows of ``kind``: its fields are the columns (built once)."""
        sql = self._inserts.get(kind)
        if sql is None:
            sql = self._inserts[kind] = insert_sql(table, [f.name for f in fields(kind)])
        return sql

    def write_run_telemetry(self, run_id: int, t: RunTelemetry) -> None:
        """Store a run's telemetry summary in its ``runs`` row."""
        values = {k: v for k, v in asdict(t).items() if k in RUN_COLUMNS}
        for key in ("contaminated", "telemetry_simulated"):
            if values[key] is not None:
                values[key] = int(values[key])
        with transaction(self._db):
            self._db.table("runs").update(run_id, values)
