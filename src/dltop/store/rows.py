"""Rows as stored: the timestamp format, the ``jobs`` row of a job spec and its insert."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import sqlite_utils

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.joblist import JobList
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
                statuses: Sequence[JobStatus | RunStatus] | None = None) -> range:
    """Insert job rows from ``first_position`` on; return their ids, in order.

    One ``executemany`` of rows made per configuration (:class:`RepeatRows`): a
    :class:`~dltop.profiles.joblist.JobList` of 100 000 repeats of a few
    configurations is stored without making a JobSpec, a row dict or a JSON
    document per job. The caller holds the transaction.
    """
    blocks = jobs.blocks if isinstance(jobs, JobList) else ((tuple(jobs), 1),)
    makers = [[RepeatRows(campaign_id, job) for job in configs] for configs, _ in blocks]
    if not any(makers):
        return range(0)

    def rows() -> Iterator[list[Any]]:  # made as SQLite takes them: no list of 100 000 rows
        k = 0
        for (_, passes), block in zip(blocks, makers, strict=True):
            for passed in range(passes):
                for maker in block:
                    yield maker.row(first_position + k,
                                    statuses[k] if statuses else JobStatus.QUEUED, passed)
                    k += 1

    db.conn.executemany(insert_sql("jobs", next(m for b in makers for m in b).columns), rows())
    # One statement under the caller's write lock: the rows took consecutive ids
    # after the largest one (SQLite's rowid rule), the last of them last_insert_rowid().
    last = int(db.conn.execute("select last_insert_rowid()").fetchone()[0])
    return range(last - len(jobs) + 1, last + 1)


class RepeatRows:
    """A configuration's ``jobs`` rows, one per repeat pass, made from one template.

    ``spec_json`` is the configuration's JSON cut around its ``repeat`` value,
    so each repeat's document is two joins, equal to ``json.dumps`` of its spec.
    """

    __slots__ = ("_at", "_head", "_repeat", "_tail", "_template", "columns")

    def __init__(self, campaign_id: int, job: JobSpec) -> None:
        row = job_row(campaign_id, 0, JobStatus.QUEUED, job)
        self.columns = tuple(row)
        self._at = tuple(self.columns.index(c)
                         for c in ("position", "status", "repeat", "spec_json"))
        self._template = [_sql_value(v) for v in row.values()]
        self._repeat = job.repeat
        spec = job.to_json_dict()
        cut = list(spec).index("repeat")
        items = list(spec.items())
        head, tail = json.dumps(dict(items[:cut])), json.dumps(dict(items[cut + 1:]))
        self._head = head[:-1] + ", " if cut else "{"
        self._tail = ", " + tail[1:] if len(items) > cut + 1 else "}"

    def row(self, position: int, status: str, passed: int) -> list[Any]:
        """The row of repeat pass ``passed`` at ``position``, in :attr:`columns` order."""
        out = self._template.copy()
        repeat = self._repeat + passed
        at_position, at_status, at_repeat, at_spec = self._at
        out[at_position], out[at_status], out[at_repeat] = position, status, repeat
        out[at_spec] = f'{self._head}"repeat": {repeat}{self._tail}'
        return out
