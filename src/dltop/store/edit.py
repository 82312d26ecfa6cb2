"""Queue edits from a viewer (the TUI) while an engine may be running the campaign.

Every edit is one SQLite transaction (``BEGIN IMMEDIATE``), and the engine takes
its next job from the database (:func:`dltop.store.queue.queued_devices`), so an
edit either happens before the engine picks a job or after: a job is never run
twice, and a job added to a campaign whose engine just finished is seen by the
caller (``needs_engine``) instead of being stranded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import sqlite_utils

from dltop.profiles.model import JobSpec
from dltop.store.writer import job_row

REMOVED = "removed"
"""Job status of a queued job the user took out of the queue (never ran)."""
RETRYABLE = ("crashed", "timeout", "diverged", "cancelled")
"""Final statuses that 'retry failed' puts back in the queue (never ``oom``: it recurs)."""
_FINISHED = ("finished", "cancelled", "failed")


@dataclass(frozen=True)
class EditResult:
    """What an edit changed, and whether the campaign now needs an engine started."""

    changed: int
    needs_engine: bool


@contextmanager
def _immediate(db: sqlite_utils.Database) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front, so the read-then-write below is
    # atomic with respect to the engine's own transactions.
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


def _reopen_if_finished(db: sqlite_utils.Database, campaign_id: int) -> bool:
    row = next(db.query("select status from campaigns where id = ?", [campaign_id]))
    if row["status"] in _FINISHED:
        db.conn.execute("update campaigns set status = 'queued', finished_at = null, "
                        "control = null where id = ?", [campaign_id])
        return True
    return False


def _tail_position(db: sqlite_utils.Database, campaign_id: int) -> int:
    row = next(db.query("select coalesce(max(position), -1) as p from jobs "
                        "where campaign_id = ?", [campaign_id]))
    return int(row["p"]) + 1


def move_job(db: sqlite_utils.Database, job_id: int, delta: int) -> EditResult:
    """Swap a queued job with its queued neighbour ``delta`` (-1 up, +1 down) places away.

    Only queued jobs move, and only among queued jobs: the running and finished
    ones keep their places.
    """
    with _immediate(db):
        rows = list(db.query(
            "select id, position from jobs where campaign_id = (select campaign_id from jobs "
            "where id = ?) and status = 'queued' order by position", [job_id]))
        ids = [r["id"] for r in rows]
        if job_id not in ids:
            return EditResult(0, False)
        i = ids.index(job_id)
        j = i + (1 if delta > 0 else -1)
        if not 0 <= j < len(rows):
            return EditResult(0, False)
        a, b = rows[i], rows[j]
        db.conn.execute("update jobs set position = ? where id = ?", [b["position"], a["id"]])
        db.conn.execute("update jobs set position = ? where id = ?", [a["position"], b["id"]])
    return EditResult(1, False)


def remove_job(db: sqlite_utils.Database, job_id: int) -> EditResult:
    """Take a queued job out of the queue (status ``removed``); other states are left."""
    with _immediate(db):
        cur = db.conn.execute("update jobs set status = ? where id = ? and status = 'queued'",
                              [REMOVED, job_id])
    return EditResult(int(cur.rowcount), False)


def retry_failed(db: sqlite_utils.Database, campaign_id: int) -> EditResult:
    """Queue the campaign's failed jobs again, at the end of the queue.

    Their earlier runs stay stored; the new run is the job's next attempt.
    """
    with _immediate(db):
        marks = ", ".join("?" for _ in RETRYABLE)
        rows = list(db.query(f"select id from jobs where campaign_id = ? and status in ({marks}) "
                             "order by position", [campaign_id, *RETRYABLE]))
        pos = _tail_position(db, campaign_id)
        for k, r in enumerate(rows):
            db.conn.execute("update jobs set status = 'queued', position = ? where id = ?",
                            [pos + k, r["id"]])
        needs = bool(rows) and _reopen_if_finished(db, campaign_id)
    return EditResult(len(rows), needs)


def append_jobs(db: sqlite_utils.Database, campaign_id: int, jobs: Sequence[JobSpec],
                profile: str) -> EditResult:
    """Append a profile's jobs to a campaign's queue (reopening it if it had finished)."""
    with _immediate(db):
        pos = _tail_position(db, campaign_id)
        for k, job in enumerate(jobs):
            # Raw SQL: sqlite-utils' insert commits on its own, which would end
            # this transaction early.
            row = job_row(campaign_id, pos + k, "queued", job)
            cols = ", ".join(row)
            db.conn.execute(f"insert into jobs ({cols}) values ({', '.join('?' for _ in row)})",
                            list(row.values()))
        row = next(db.query("select profiles from campaigns where id = ?", [campaign_id]))
        names = json.loads(row["profiles"] or "[]")
        if profile not in names:
            db.conn.execute("update campaigns set profiles = ? where id = ?",
                            [json.dumps([*names, profile]), campaign_id])
        needs = bool(jobs) and _reopen_if_finished(db, campaign_id)
    return EditResult(len(jobs), needs)


def cancel_run(db: sqlite_utils.Database, campaign_id: int, run_id: int) -> EditResult:
    """Ask the campaign's engine to cancel one run (the queue goes on)."""
    with _immediate(db):
        cur = db.conn.execute("update campaigns set cancel_run_id = ? where id = ?",
                              [run_id, campaign_id])
    return EditResult(int(cur.rowcount), False)
