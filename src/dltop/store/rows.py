"""Rows as stored: the timestamp format, the ``jobs`` row of a job spec and its insert."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import sqlite_utils

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.model import JobSpec


def utc_now() -> str:
    """ISO-8601 UTC timestamp with milliseconds."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def job_row(campaign_id: int, position: int, status: JobStatus | RunStatus,
            job: JobSpec) -> dict[str, Any]:
    """The ``jobs`` table row of a job spec (its own columns: :meth:`JobSpec.columns`)."""
    return {"campaign_id": campaign_id, "position": position, "status": status,
            **job.columns()}


def marks(values: Collection[object]) -> str:
    """``?, ?, ?``: one SQL parameter mark per value, for ``in (...)``."""
    return ", ".join("?" for _ in values)


def _sql_value(value: Any) -> Any:
    """A column value as SQLite takes it: dicts and lists as JSON (as sqlite-utils stores them)."""
    return json.dumps(value) if isinstance(value, dict | list | tuple) else value


def update_row(db: sqlite_utils.Database, table: str, row_id: int,
               values: Mapping[str, Any]) -> None:
    """``update <table> set ... where id = ?`` with plain SQL: the caller holds the transaction.

    sqlite-utils' ``update`` reads the table's schema and the row before each update;
    this is the engine's per-run path, so one statement does it.

    Raises:
        sqlite_utils.db.NotFoundError: no row of ``table`` has that id (as sqlite-utils'
            ``update`` raises; the caller's transaction rolls back).
    """
    if not values:
        return
    sets = ", ".join(f'"{name}" = ?' for name in values)
    cur = db.conn.execute(f'update "{table}" set {sets} where id = ?',
                          [*map(_sql_value, values.values()), row_id])
    if cur.rowcount != 1:
        from sqlite_utils.db import NotFoundError  # only on this error path

        raise NotFoundError(f"{table}: no row with id {row_id}")


def insert_sql(table: str, columns: Sequence[str], *, replace: bool = False) -> str:
    """``insert into <table> (<columns>) values (?, ...)``, for ``executemany``."""
    cols = ", ".join(f'"{name}"' for name in columns)
    verb = "insert or replace" if replace else "insert"
    return f'{verb} into "{table}" ({cols}) values ({marks(columns)})'


def insert_row(db: sqlite_utils.Database, table: str, values: Mapping[str, Any]) -> int:
    """``insert into <table> (...) values (...)``; return the new row's id."""
    cols = ", ".join(f'"{name}"' for name in values)
    cur = db.conn.execute(f'insert into "{table}" ({cols}) values ({marks(values)})',
                          [_sql_value(v) for v in values.values()])
    return pk(cur.lastrowid)


def pk(value: Any) -> int:
    """The primary key an insert returned (an int, never None)."""
    if value is None:
        raise RuntimeError("insert returned no primary key")
    return int(value)


def insert_jobs(db: sqlite_utils.Database, campaign_id: int, first_position: int,
                jobs: Sequence[JobSpec],
                statuses: Sequence[JobStatus | RunStatus] | None = None) -> list[int]:
    """Insert job rows from ``first_position`` on; the caller holds the transaction."""
    ids = []
    for k, job in enumerate(jobs):
        status = statuses[k] if statuses else JobStatus.QUEUED
        row = db.table("jobs").insert(job_row(campaign_id, first_position + k, status, job))
        ids.append(pk(row.last_pk))
    return ids
