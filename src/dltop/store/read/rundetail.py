"""One run's detail beside its row (:func:`dltop.store.read.runs.with_job`): its
environment, its attempts, whether prune archived its raw rows, its log, and the
iterations a running run stored since a viewer last read them (the run detail screen,
the report, ``dltop log``)."""

from __future__ import annotations

import os
from typing import Any

from dltop.paths import stored_path
from dltop.store.archive import ARCHIVE
from dltop.store.read.changes import main_file
from dltop.store.read.schema import has_table


def environment_row(db: Any, run_id: int) -> dict[str, Any] | None:
    """The run's ``environment`` row (None before its runner said hello)."""
    return next(iter(db.query("select * from environment where run_id = ?", [run_id])), None)


def pruned(db: Any, run_id: int) -> bool:
    """Whether ``dltop prune`` archived the run's raw rows (and deleted them)."""
    return has_table(db, ARCHIVE) and next(iter(db.query(
        f"select 1 as x from {ARCHIVE} where run_id = ?", [run_id])), None) is not None


def job_attempts(db: Any, job_id: int) -> tuple[int, ...]:
    """Run ids of a job's attempts, oldest first (empty while it never ran)."""
    return tuple(int(r["id"]) for r in db.query(
        "select id from runs where job_id = ? order by id", [job_id]))


def job_status(db: Any, job_id: int) -> str | None:
    """A job's queue status (None: no such job)."""
    row = next(iter(db.query("select status from jobs where id = ?", [job_id])), None)
    return None if row is None else str(row["status"])


def run_log(db: Any, run_id: int) -> tuple[str, str | None] | None:
    """The run's status and its log's path, absolute (None: no such run)."""
    row = next(iter(db.query("select status, log_path from runs where id = ?", [run_id])),
               None)
    return None if row is None else (str(row["status"]), log_path(db, row["log_path"]))


def log_path(db: Any, stored: str | None) -> str | None:
    """A stored ``runs.log_path`` made absolute (older dltops stored it relative)."""
    if not stored or os.path.isabs(stored):
        return stored
    file = main_file(db)
    return stored_path(stored, file) if file else stored


def iteration_end_ns(db: Any, run_id: int, idx: int) -> int | None:
    """When the run's iteration ``idx`` ended, monotonic ns (None: not stored, no clock)."""
    row = next(iter(db.query("select t_mono_ns from iterations where run_id = ? and idx = ?",
                             [run_id, idx])), None)
    return None if row is None else row["t_mono_ns"]


def iterations_after(db: Any, run_id: int, idx: int) -> list[dict[str, Any]]:
    """The run's iterations past ``idx``, in order."""
    return list(db.query("select idx, seconds, samples, warmup, loss, t_mono_ns from "
                         "iterations where run_id = ? and idx > ? order by idx",
                         [run_id, idx]))
