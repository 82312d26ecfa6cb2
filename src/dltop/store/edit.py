"""Queue edits from a viewer (the TUI) while an engine may be running the campaign.

Every edit is one store transaction (``BEGIN IMMEDIATE``, see
:mod:`dltop.store.tx`), and the engine takes its next job from the database
(:meth:`dltop.store.queue.Queue.next_startable`), so an edit either happens
before the engine picks a job or after: a job is never run twice, and a job
added to a campaign whose engine just finished is seen by the caller
(``needs_engine``) instead of being stranded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import sqlite_utils

from dltop.catalog import (
    ENDED_CAMPAIGN_STATUSES,
    RETRYABLE_STATUSES,
    CampaignStatus,
    JobStatus,
    RunStatus,
)
from dltop.profiles.jobspec import JobSpec
from dltop.store.read.runs import marks
from dltop.store.rows import insert_jobs
from dltop.store.tx import transaction


@dataclass(frozen=True)
class EditResult:
    """What an edit changed, and whether the campaign now needs an engine started."""

    changed: int
    needs_engine: bool


class Edits:
    """A viewer's queue edits on one connection (``Store.edits``)."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self._db = db

    def _reopen_if_finished(self, campaign_id: int) -> bool:
        row = next(self._db.query("select status from campaigns where id = ?", [campaign_id]))
        if row["status"] in ENDED_CAMPAIGN_STATUSES:
            self._db.table("campaigns").update(campaign_id, {
                "status": CampaignStatus.QUEUED, "finished_at": None, "control": None})
            return True
        return False

    def _tail_position(self, campaign_id: int) -> int:
        row = next(self._db.query("select coalesce(max(position), -1) as p from jobs "
                                  "where campaign_id = ?", [campaign_id]))
        return int(row["p"]) + 1

    def move_job(self, job_id: int, delta: int) -> EditResult:
        """Swap a queued job with its queued neighbour ``delta`` (-1 up, +1 down) places away.

        Only queued jobs move, and only among queued jobs: the running and finished
        ones keep their places.
        """
        with transaction(self._db):
            rows = list(self._db.query(
                "select id, position from jobs where campaign_id = (select campaign_id from "
                "jobs where id = ?) and status = ? order by position",
                [job_id, JobStatus.QUEUED]))
            ids = [r["id"] for r in rows]
            if job_id not in ids:
                return EditResult(0, False)
            i = ids.index(job_id)
            j = i + (1 if delta > 0 else -1)
            if not 0 <= j < len(rows):
                return EditResult(0, False)
            a, b = rows[i], rows[j]
            jobs = self._db.table("jobs")
            jobs.update(a["id"], {"position": b["position"]})
            jobs.update(b["id"], {"position": a["position"]})
        return EditResult(1, False)

    def remove_job(self, job_id: int) -> EditResult:
        """Take a queued job out of the queue (status ``removed``); other states are left."""
        with transaction(self._db):
            cur = self._db.execute("update jobs set status = ? where id = ? and status = ?",
                                   [JobStatus.REMOVED, job_id, JobStatus.QUEUED])
        return EditResult(int(cur.rowcount), False)

    def retry_failed(self, campaign_id: int) -> EditResult:
        """Queue the campaign's failed jobs again, at the end of the queue.

        Their earlier runs stay stored; the new run is the job's next attempt.
        """
        retryable = sorted(RETRYABLE_STATUSES)  # never ``oom``: it recurs
        with transaction(self._db):
            rows = list(self._db.query(
                f"select id from jobs where campaign_id = ? and status in ({marks(retryable)}) "
                "order by position", [campaign_id, *retryable]))
            pos = self._tail_position(campaign_id)
            for k, r in enumerate(rows):
                self._db.table("jobs").update(r["id"], {"status": JobStatus.QUEUED,
                                                       "position": pos + k})
            needs = bool(rows) and self._reopen_if_finished(campaign_id)
        return EditResult(len(rows), needs)

    def append_jobs(self, campaign_id: int, jobs: Sequence[JobSpec],
                    profile: str) -> EditResult:
        """Append a profile's jobs to a campaign's queue (reopening it if it had finished)."""
        with transaction(self._db):
            insert_jobs(self._db, campaign_id, self._tail_position(campaign_id), jobs)
            row = next(self._db.query("select profiles from campaigns where id = ?",
                                      [campaign_id]))
            names = json.loads(row["profiles"] or "[]")
            if profile not in names:
                self._db.table("campaigns").update(campaign_id,
                                                   {"profiles": json.dumps([*names, profile])})
            needs = bool(jobs) and self._reopen_if_finished(campaign_id)
        return EditResult(len(jobs), needs)

    def cancel_run(self, campaign_id: int, run_id: int) -> EditResult:
        """Ask the campaign's engine to cancel one run (the queue goes on).

        Only while that run is still running (``changed`` is 0 otherwise): the engine
        cancels by run id, so a request for a run that ended is never applied to the
        run that started after it.
        """
        with transaction(self._db):
            cur = self._db.execute(
                "update campaigns set cancel_run_id = ? where id = ? and exists (select 1 "
                "from runs where id = ? and campaign_id = ? and status = ?)",
                [run_id, campaign_id, run_id, campaign_id, RunStatus.RUNNING])
        return EditResult(int(cur.rowcount), False)
