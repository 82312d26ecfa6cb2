"""Runs: their columns, a run with its job, and what a set of finished campaigns' results
depend on."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from dltop.store import samples
from dltop.store.read.schema import has_table
from dltop.store.views import JOB_SPECS

CHUNK = 500
"""Ids per ``in (...)`` query (under SQLite's bound-parameter limit)."""


def marks(values: Collection[object]) -> str:
    """``?,?,?``: one parameter mark per value, for ``in (...)``."""
    return ",".join("?" * len(values))


def in_chunks(ids: Sequence[int]) -> Iterator[tuple[list[int], str]]:
    """``ids`` in chunks of :data:`CHUNK`, each with its ``?, ?, ...`` placeholders."""
    for i in range(0, len(ids), CHUNK):
        chunk = list(ids[i:i + CHUNK])
        yield chunk, marks(chunk)


def by_run(db: Any, run_ids: Sequence[int], table: str, sql: str) -> dict[int, list[Any]]:
    """The rows of ``sql`` (``{marks}``: a chunk of ``run_ids``) by their ``run_id``, in
    the order read; empty on a database before ``table``'s migration."""
    out: dict[int, list[Any]] = {}
    if not run_ids or not has_table(db, table):
        return out
    for chunk, qs in in_chunks(run_ids):
        for r in db.query(sql.format(marks=qs), chunk):
            out.setdefault(int(r["run_id"]), []).append(r)
    return out


def campaign_marks(db: Any, ids: Sequence[int]) -> tuple[tuple[Any, ...], ...] | None:
    """Per campaign of ``ids``, by id: (id, status, jobs_counted, jobs_queued, its run
    count, its last run id); None before the job counts (migration 11)."""
    try:
        return tuple(db.execute(
            "select c.id, c.status, c.jobs_counted, c.jobs_queued, "
            "(select count(*) from runs r where r.campaign_id = c.id), "
            "(select max(id) from runs r where r.campaign_id = c.id) "
            f"from campaigns c where c.id in ({marks(ids)}) order by c.id", list(ids)))
    except sqlite3.OperationalError:
        return None


def any_simulated(db: Any, campaign_ids: Sequence[int]) -> bool:
    """Whether any run of the campaigns read simulated GPUs: the runs' stored flag
    (migration 11 set it for runs stored before from their samples), else the samples."""
    if not next(db.query("select exists (select 1 from schema_migrations where version = 11) "
                         "as v"))["v"]:
        # a database no dltop with migration 11 has written: its CPU runs beside
        # simulated GPUs were not flagged, their samples say it
        return samples.any_simulated(db, campaign_ids)
    return bool(next(db.query(
        f"select exists (select 1 from runs where campaign_id in ({marks(campaign_ids)}) "
        "and telemetry_simulated = 1) as simulated", list(campaign_ids)))["simulated"])


def with_job(db: Any, run_id: int) -> dict[str, Any] | None:
    """Every column of run ``run_id``, and its job's framework, model, batch_size, device,
    repeat, iterations, warmup and spec_json (None: no such run)."""
    return next(iter(db.query(
        "select r.*, j.framework, j.model, j.batch_size, j.device, j.repeat, j.iterations, "
        "j.warmup, s.spec_json "
        f"from runs r join jobs j on j.id = r.job_id join {JOB_SPECS} s "
        "on s.job_id = r.job_id where r.id = ?", [run_id])), None)
