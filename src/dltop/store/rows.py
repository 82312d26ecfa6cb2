"""Rows as stored: the timestamp format, the ``jobs`` row of a job spec and its insert."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlite_utils

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.joblist import JobList
from dltop.profiles.jobspec import JobSpec
from dltop.store.read.runs import marks
from dltop.store.read.schema import columns
from dltop.store.templates import (
    CONFIG_COLUMNS,
    add_templates,
    count_configs,
    read_back,
    spec_without_repeat,
)


def utc_now() -> str:
    """ISO-8601 UTC timestamp with milliseconds."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def job_row(campaign_id: int, position: int, status: JobStatus | RunStatus,
            job: JobSpec) -> dict[str, Any]:
    """The ``jobs`` table row of a job spec (its own columns: :meth:`JobSpec.columns`)."""
    return {"campaign_id": campaign_id, "position": position, "status": status,
            **job.columns()}


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


def insert_sql(table: str, columns: Sequence[str]) -> str:
    """``insert into <table> (<columns>) values (?, ...)``, for ``executemany``."""
    cols = ", ".join(f'"{name}"' for name in columns)
    return f'insert into "{table}" ({cols}) values ({marks(columns)})'


def upsert_sql(table: str, columns: Sequence[str], run_id: str = "?") -> str:
    """``insert or replace`` of a run's rows of ``table``: ``run_id`` (a parameter, or
    a ``{run_id}`` slot for a literal), then ``columns``."""
    return (f"insert or replace into {table} (run_id, {', '.join(columns)}) "
            f"values ({run_id}, {marks(columns)})")


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
    document per job. On a database with ``job_templates`` (migration 23) each
    configuration's spec is stored once and a job row holds what differs
    (:mod:`dltop.store.templates`). The caller holds the transaction. One stored
    spec of each configuration is read back before this returns
    (:func:`~dltop.store.templates.read_back`).

    Raises:
        UserError: a stored spec does not read back (the caller's transaction, rolled
            back, stores none of it).
    """
    blocks = jobs.blocks if isinstance(jobs, JobList) else ((tuple(jobs), 1),)
    compact = "template" in columns(db, "jobs")
    makers = [[RepeatRows(campaign_id, job, compact=compact) for job in configs]
              for configs, _ in blocks]
    if not any(makers):
        return range(0)
    if compact:
        _templates_and_counts(db, campaign_id, first_position, blocks, makers)

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
    ids = range(last - len(jobs) + 1, last + 1)
    read_back(db, ids, compact)  # in the caller's transaction: a failure stores nothing
    return ids


def _templates_and_counts(db: sqlite_utils.Database, campaign_id: int, first_position: int,
                          blocks: Sequence[tuple[Sequence[JobSpec], int]],
                          makers: list[list[RepeatRows]]) -> None:
    """Store the configurations' templates, number the makers' rows after them, and
    add the jobs to ``job_configs`` (which a trigger does for full rows)."""
    numbers = add_templates(db, campaign_id, ((m.template_key, m.config_key, m.spec)
                                              for block in makers for m in block))
    counts: dict[str, list[Any]] = {}  # config_key -> [maker, jobs, first position]
    k = 0
    for (_, passes), block in zip(blocks, makers, strict=True):
        for i, maker in enumerate(block):
            maker.set_template(numbers[maker.template_key])
            got = counts.setdefault(maker.config_key, [maker, 0, first_position + k + i])
            got[1] += passes
        k += passes * len(block)
    count_configs(db, campaign_id, ((key, m.config_columns, m.spec_json, jobs, first)
                                    for key, (m, jobs, first) in counts.items()))


class RepeatRows:
    """A configuration's ``jobs`` rows, one per repeat pass, made from one template.

    Full rows (a database before migration 23): ``spec_json`` is the configuration's
    JSON cut around its ``repeat`` value, so each repeat's document is two joins,
    equal to ``json.dumps`` of its spec. Compact rows (``compact``) leave
    ``spec_json`` and ``config_key`` out and name the stored template instead
    (:meth:`set_template`).
    """

    __slots__ = ("_at", "_compact", "_head", "_repeat", "_tail", "_template", "columns",
                 "config_columns", "config_key", "spec", "spec_json", "template_key")

    def __init__(self, campaign_id: int, job: JobSpec, *, compact: bool = False) -> None:
        row = job_row(campaign_id, 0, JobStatus.QUEUED, job)
        self.config_key = str(row["config_key"])
        self.spec_json = str(row["spec_json"])
        self.config_columns = {c: row[c] for c in CONFIG_COLUMNS}
        self._compact = compact
        if compact:
            del row["config_key"], row["spec_json"]
            row["template"] = None
        self.columns = tuple(row)
        self._at = tuple(self.columns.index(c) if c in self.columns else -1
                         for c in ("position", "status", "repeat", "spec_json"))
        self._template = [_sql_value(v) for v in row.values()]
        self._repeat = job.repeat
        self.spec = job.to_json_dict()
        self.template_key = spec_without_repeat(self.spec)
        cut = list(self.spec).index("repeat")
        items = list(self.spec.items())
        head, tail = json.dumps(dict(items[:cut])), json.dumps(dict(items[cut + 1:]))
        self._head = head[:-1] + ", " if cut else "{"
        self._tail = ", " + tail[1:] if len(items) > cut + 1 else "}"

    def set_template(self, n: int) -> None:
        """Compact rows: the ``job_templates`` number of this configuration's spec."""
        self._template[self.columns.index("template")] = n

    def row(self, position: int, status: str, passed: int) -> list[Any]:
        """The row of repeat pass ``passed`` at ``position``, in :attr:`columns` order."""
        out = self._template.copy()
        repeat = self._repeat + passed
        at_position, at_status, at_repeat, at_spec = self._at
        out[at_position], out[at_status], out[at_repeat] = position, status, repeat
        if not self._compact:
            out[at_spec] = f'{self._head}"repeat": {repeat}{self._tail}'
        return out
