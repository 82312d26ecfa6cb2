"""The durable queue: what the engine takes jobs from, and what a restarted engine repairs.

Queue state lives in the ``jobs`` table; an engine that died (SIGKILL, reboot)
leaves its campaign ``running`` and its current run ``running``. Resuming marks
that run as lost, puts its job back in the queue and runs what is left, so a
finished run is never repeated or lost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from dltop.catalog import (
    CampaignStatus,
    ErrorKind,
    JobStatus,
    RunStatus,
)
from dltop.profiles.device import DeviceSpec
from dltop.profiles.jobspec import JobSpec
from dltop.store.fence import COLUMN as GENERATION
from dltop.store.fence import Fence, OwnershipLost, fence_of, has_generation, set_fence
from dltop.store.read.campaigns import OpenCampaign, open_campaigns
from dltop.store.read.jobs import status_counts
from dltop.store.read.runs import marks
from dltop.store.read.schema import columns
from dltop.store.rows import update_row, utc_now
from dltop.store.tx import transaction

LOST_MESSAGE = "the dltop engine stopped before this run finished; the job was re-queued"


@dataclass(frozen=True)
class RunProcess:
    """A run stored as ``running``, with what identifies its process group safely."""

    run_id: int
    job_id: int
    pid: int | None
    pgid: int | None
    proc_start_time: float | None
    slurm_job_id: str | None = None
    """A Slurm run's job (a batch job; a step's allocation, whose srun is ``pid``)."""
    slurm_state: str | None = None
    """Its last state seen (None: submitted, not yet seen)."""
    executor: str = "local"
    """The registered name of the executor that started it (``runs.executor``)."""


class Queue:
    """The campaign queue of one connection (``Store.queue``)."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self._db = db

    # reads -----------------------------------------------------------------
    def open_campaigns(self) -> list[OpenCampaign]:
        """Campaigns still ``queued``, ``running``, ``paused`` or ``waiting``, oldest first."""
        return open_campaigns(self._db)

    def running_runs(self, campaign_id: int) -> list[RunProcess]:
        """Runs of a campaign still marked ``running``."""
        return [RunProcess(r["id"], r["job_id"], r["pid"], r["pgid"], r["proc_start_time"],
                           r["slurm_job_id"], r["slurm_state"], r["executor"])
                for r in self._db.query(
                    "select id, job_id, pid, pgid, proc_start_time, slurm_job_id, slurm_state, "
                    "executor "
                    "from runs where campaign_id = ? and status = ?",
                    [campaign_id, RunStatus.RUNNING])]

    def queued_jobs(self, campaign_id: int) -> list[tuple[int, int, JobSpec]]:
        """(job id, position, spec) of the campaign's queued jobs, in queue order.

        Reads the whole queue (tests, small campaigns): the engine takes one job at
        a time with :meth:`next_startable` and :meth:`queued_spec`.
        """
        rows: list[dict[str, Any]] = list(self._db.query(
            "select j.id, j.position, s.spec_json from jobs j "
            "join job_specs s on s.job_id = j.id where j.campaign_id = ? "
            "and j.status = ? order by j.position", [campaign_id, JobStatus.QUEUED]))
        return [(r["id"], r["position"], JobSpec.from_json_dict(json.loads(r["spec_json"])))
                for r in rows]

    def queued_count(self, campaign_id: int) -> int:
        """How many of the campaign's jobs are queued (a count, not the jobs)."""
        if self._has_counts():
            # Kept by the jobs table's triggers (migration 11): one row, however long the queue.
            row = next(self._db.query("select jobs_queued as n from campaigns where id = ?",
                                      [campaign_id]), None)
        else:
            row = next(self._db.query("select count(*) as n from jobs where campaign_id = ? "
                                      "and status = ?", [campaign_id, JobStatus.QUEUED]))
        return 0 if row is None else int(row["n"])

    def queued_devices(self, campaign_id: int) -> list[tuple[int, int, DeviceSpec]]:
        """(job id, position, device) of the campaign's queued jobs, in queue order.

        Reads the whole queue: the engine asks :meth:`next_startable` instead.
        """
        return [(r["id"], r["position"], DeviceSpec.parse(r["device"])) for r in self._db.query(
            "select id, position, device from jobs where campaign_id = ? and status = ? "
            "order by position", [campaign_id, JobStatus.QUEUED])]

    def next_startable(self, campaign_id: int, max_gpus: int | None, max_cpus: int | None,
                       skip: Collection[int] = ()) -> tuple[int, int, DeviceSpec] | None:
        """(job id, position, device) of the first queued job that fits, or None.

        What the engine asks at each job start (and each poll while packing): one
        query walking the queue index in order, stopping at the first match, so its
        cost does not grow with the queue's length in the usual case.

        Args:
            max_gpus: most GPUs a ``gpu:N`` job may ask for (None: any number).
            max_cpus: most CPUs a ``cpu:N`` or ``cpus:P`` job may ask for (None: any).
            skip: job ids not to return (those the engine already holds).
        """
        unlimited = 2**62  # beyond any device count; a bound keeps one statement shape
        args: list[Any] = [campaign_id, JobStatus.QUEUED,
                           unlimited if max_gpus is None else max_gpus,
                           unlimited if max_cpus is None else max_cpus, *skip]
        row = next(self._db.query(
            "select id, position, device from jobs where campaign_id = ? and status = ? "
            "and device_count <= case device_kind when 'gpu' then ? else ? end "
            f"and id not in ({marks(skip)}) order by position limit 1", args), None)
        return None if row is None else (row["id"], row["position"],
                                         DeviceSpec.parse(row["device"]))

    def queued_spec(self, job_id: int) -> JobSpec | None:
        """The job's spec while it is still queued (None once removed or started)."""
        row = next(self._db.query("select s.spec_json from jobs j join job_specs s "
                                  "on s.job_id = j.id where j.id = ? and j.status = ?",
                                  [job_id, JobStatus.QUEUED]), None)
        return None if row is None else JobSpec.from_json_dict(json.loads(row["spec_json"]))

    def progress(self, campaign_id: int) -> tuple[int, int]:
        """(jobs done or running, jobs in the campaign) ignoring removed and unsatisfiable ones."""
        if not self._has_counts():
            row = next(self._db.query(
                "select sum(status != ?) as done, count(*) as total from jobs "
                "where campaign_id = ? and status not in (?, ?)",
                [JobStatus.QUEUED, campaign_id, JobStatus.REMOVED, RunStatus.UNSATISFIABLE]))
            return int(row["done"] or 0), int(row["total"] or 0)
        # Counts the jobs table's triggers keep (migration 11): one row read, however
        # long the queue, where counting the jobs would grow with it at every job start.
        counts = next(self._db.query("select jobs_counted, jobs_queued from campaigns "
                                     "where id = ?", [campaign_id]), None)
        if counts is None:
            return 0, 0
        return (int(counts["jobs_counted"]) - int(counts["jobs_queued"]),
                int(counts["jobs_counted"]))

    def _has_counts(self) -> bool:
        # a database opened without migrating (``run --resume``) may lack them (migration 11)
        return "jobs_counted" in columns(self._db, "campaigns")

    def next_attempt(self, job_id: int) -> int:
        """1 + the number of runs the job already has."""
        row = next(self._db.query("select count(*) as n from runs where job_id = ?", [job_id]))
        return int(row["n"]) + 1

    def control(self, campaign_id: int) -> str | None:
        """The control request another process left for this campaign (or None)."""
        row = next(self._db.query("select control from campaigns where id = ?", [campaign_id]),
                   None)
        return row["control"] if row else None

    def packs(self, campaign_id: int) -> bool:
        """Whether the campaign runs jobs at once on disjoint devices."""
        row = next(self._db.query("select pack from campaigns where id = ?", [campaign_id]),
                   None)
        return bool(row and row["pack"])

    # writes ----------------------------------------------------------------
    def mark_lost_and_requeue(self, run: RunProcess) -> None:
        """The run's engine died: close the run as ``crashed`` and queue its job again."""
        with transaction(self._db):
            update_row(self._db, "runs", run.run_id, {
                "status": RunStatus.CRASHED, "error_kind": ErrorKind.ENGINE_LOST,
                "error_message": LOST_MESSAGE, "finished_at": utc_now()})
            update_row(self._db, "jobs", run.job_id, {"status": JobStatus.QUEUED})

    def requeue_running_jobs(self, campaign_id: int) -> int:
        """Jobs left ``running`` without a running run go back to ``queued``; return how many."""
        return self._requeue(campaign_id, JobStatus.RUNNING)

    def _requeue(self, campaign_id: int, status: str) -> int:
        with transaction(self._db):
            cur = self._db.execute(
                "update jobs set status = ? where campaign_id = ? and status = ?",
                [JobStatus.QUEUED, campaign_id, status])
        return int(cur.rowcount)

    def claim(self, campaign_id: int, pid: int, start_time: float,
              previous: tuple[int | None, float | None], host: str | None = None,
              generation: int | None = None) -> bool:
        """Make this engine process the campaign's owner if ``previous`` still owns it.

        One compare-and-set statement: of two processes taking over the same dead
        engine's campaign at once, exactly one gets True. The new owner's host and a
        first heartbeat are recorded with it, its owner generation is one more than the
        last, and this connection's writes are fenced on it (:mod:`dltop.store.fence`):
        the engine it took over from can write nothing more, whenever it wakes.

        Args:
            previous: (engine pid, engine start time) the caller found dead.
            host: this engine's host (:func:`dltop.procs.this_host`).
            generation: the owner generation the caller found (None: not compared).
        """
        beat = ", engine_host = ?, engine_heartbeat_s = ?" if self.has_heartbeat() else ""
        fenced = self.has_generation()
        bump = f", {GENERATION} = {GENERATION} + 1" if fenced else ""
        same = f" and {GENERATION} = ?" if fenced and generation is not None else ""
        was = fence_of(self._db)
        set_fence(self._db, None)  # the statement itself compares what it takes over
        try:
            with transaction(self._db):
                cur = self._db.execute(
                    f"update campaigns set engine_pid = ?, engine_start_time = ?, control = null"
                    f"{beat}{bump} where id = ? and engine_pid is ? and engine_start_time is ?"
                    f"{same}",
                    [pid, start_time, *([host, time.time()] if beat else []), campaign_id,
                     *previous, *([generation] if same else [])])
                won = cur.rowcount == 1
                now = None if not (won and fenced) else int(self._db.execute(
                    f"select {GENERATION} from campaigns where id = ?",
                    [campaign_id]).fetchone()[0])
        except BaseException:
            set_fence(self._db, was)
            raise
        set_fence(self._db, was if now is None else Fence(campaign_id, now))
        return won

    def heartbeat(self, campaign_id: int, pid: int, host: str) -> bool:
        """Refresh the engine's heartbeat (now, epoch seconds) while it owns the campaign.

        Returns:
            False when the database predates heartbeats, or (on a connection without a
            fence) another engine took the campaign over: nothing was written.

        Raises:
            OwnershipLost: this connection is fenced on the campaign and another engine
                owns it now (a beat that updates nothing means that too).
        """
        if not self.has_heartbeat():
            return False
        with transaction(self._db):  # fenced: checks the generation first
            cur = self._db.execute(
                "update campaigns set engine_heartbeat_s = ? "
                "where id = ? and engine_pid = ? and engine_host = ?",
                [time.time(), campaign_id, pid, host])
            owner = fence_of(self._db)
            if cur.rowcount != 1 and owner is not None and owner.campaign_id == campaign_id:
                row = self._db.execute(
                    f"select {GENERATION}, engine_host, engine_pid from campaigns "
                    "where id = ?", [campaign_id]).fetchone()
                raise OwnershipLost(campaign_id, owner.generation,
                                    *(row if row is not None else (None, None, None)))
        return cur.rowcount == 1

    def has_generation(self) -> bool:
        """Whether ``campaigns`` has the owner generation (migration 24)."""
        return has_generation(self._db)

    def has_heartbeat(self) -> bool:
        """Whether ``campaigns`` has the engine's heartbeat columns (migration 22)."""
        return "engine_heartbeat_s" in columns(self._db, "campaigns")

    def set_waiting(self, campaign_id: int, waiting_for: str | None,
                    devices: str | None = None, holders: int | None = None) -> None:
        """``waiting`` for devices (``waiting_for`` says which and who holds them), or
        back to ``running``.

        Only a ``running`` campaign starts waiting and only a ``waiting`` one goes
        back, so a pause or the campaign's end is never overwritten. ``devices`` (the
        devices wanted, ``gpu 0-1``) and ``holders`` (how many other processes hold
        them or wait ahead) are what may leave the host (the exporter); the wait's
        start (``waiting_since_s``, epoch seconds) is kept while it goes on.
        """
        with transaction(self._db):
            running, waiting = CampaignStatus.RUNNING, CampaignStatus.WAITING
            if waiting_for is None:
                self._db.execute("update campaigns set status = ?, waiting_for = null, "
                                 "waiting_since_s = null, waiting_devices = null, "
                                 "waiting_holders = null "
                                 "where id = ? and status = ?", [running, campaign_id, waiting])
            else:
                now = time.time()  # the old status on the right: a wait goes on from its start
                self._db.execute("update campaigns set status = ?, waiting_for = ?, "
                                 "waiting_since_s = case when status = ? then "
                                 "coalesce(waiting_since_s, ?) else ? end, "
                                 "waiting_devices = ?, waiting_holders = ? "
                                 "where id = ? and status in (?, ?)",
                                 [waiting, waiting_for, waiting, now, now,
                                  devices, holders, campaign_id, running, waiting])

    def finish_if_drained(self, campaign_id: int, status: CampaignStatus,
                          finished_at: str, stopped_by: str | None = None) -> bool:
        """Close the campaign with ``status`` unless jobs were queued meanwhile; True if closed.

        One statement, so a viewer's append either lands before (and is run) or
        finds the campaign closed (and starts an engine). ``stopped_by`` (what
        cancelled it: a signal, ``dltop cancel``) goes in ``error_message``.
        """
        with transaction(self._db):
            cur = self._db.execute(
                "update campaigns set status = ?, finished_at = ?, error_message = ? "
                "where id = ? and not exists "
                "(select 1 from jobs where campaign_id = ? and status = ?)",
                [status, finished_at, stopped_by, campaign_id, campaign_id, JobStatus.QUEUED])
        return cur.rowcount == 1

    def cancel_queued(self, campaign_id: int) -> int:
        """Mark every queued job of the campaign ``cancelled``; return how many."""
        with transaction(self._db):
            cur = self._db.execute("update jobs set status = ? where campaign_id = ? "
                                   "and status = ?",
                                   [RunStatus.CANCELLED, campaign_id, JobStatus.QUEUED])
        return int(cur.rowcount)

    def take_cancel_run(self, campaign_id: int) -> int | None:
        """The run id a viewer asked to cancel (cleared as it is read), or None."""
        # Read first: the engine polls this every half second, and taking the write
        # lock each time would make a viewer's edits wait for nothing.
        row = next(self._db.query("select cancel_run_id from campaigns where id = ?",
                                  [campaign_id]), None)
        if row is None or row["cancel_run_id"] is None:
            return None
        with transaction(self._db):
            # Only the request read: one a viewer replaced meanwhile is taken next poll.
            cur = self._db.execute("update campaigns set cancel_run_id = null where id = ? "
                                   "and cancel_run_id = ?", [campaign_id, row["cancel_run_id"]])
        return int(row["cancel_run_id"]) if cur.rowcount == 1 else None

    def cancelled_campaigns(self) -> list[OpenCampaign]:
        """Campaigns ``cancelled`` (Ctrl-C, SIGTERM, ``dltop cancel``) with jobs left
        ``cancelled``, oldest first: ``dltop run --resume`` may queue them again."""
        return [c for c in open_campaigns(self._db, [CampaignStatus.CANCELLED])
                if status_counts(self._db, c.id).get(RunStatus.CANCELLED)]

    def requeue_cancelled_jobs(self, campaign_id: int) -> int:
        """The campaign's ``cancelled`` jobs go back to ``queued``; return how many."""
        return self._requeue(campaign_id, RunStatus.CANCELLED)

    def failed_campaigns(self) -> list[OpenCampaign]:
        """Campaigns whose engine stopped on a storage error (``failed``), oldest first.

        They keep their queue, so ``dltop run --resume`` can take them up again once
        the cause (a full disk, a lock) is gone.
        """
        return open_campaigns(self._db, [CampaignStatus.FAILED])
