"""One ``squeue`` for all of an engine's Slurm jobs per poll, with back-off while pending.

Every :class:`~dltop.jobs.executors.slurm.BatchWatch` of an engine asks the same
:class:`SqueuePoller` (:func:`poller_for`): one ``squeue -j ID1,ID2,...`` a poll answers
them all, where a ``scontrol show job`` per job each second would load slurmctld in
proportion to the runs in flight. While every watched job is pending the interval
doubles from :data:`POLL_S` up to :data:`BACKOFF_MAX_S` (submitit's watcher does the
same): a queued job changes nothing dltop must act on. A job seen running, a new job,
a cancel or the job's first events bring the interval back to :data:`POLL_S`
(:meth:`SqueuePoller.kick`).

Queue time comes from Slurm's own clock (``%V`` submit and ``%S`` start time), so a
start seen late through the back-off is still timed from the moment the job started.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

from dltop.jobs.executors.slurm_query import run_slurm_cmd

POLL_S = 1.0
"""The interval while any watched job runs (and the first after a change)."""
BACKOFF_MAX_S = 30.0
"""The longest interval while every watched job is pending."""
SQUEUE_FORMAT = "%i|%T|%r|%N|%V|%S"
"""Job id, state, reason, node list, submit time, start time."""
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                            "RESV_DEL_HOLD", "CONFIGURING"})
"""States with nothing for dltop to act on: the back-off grows while all are in one."""


@dataclass(frozen=True)
class JobInfo:
    """One job's line of ``squeue`` (:data:`SQUEUE_FORMAT`)."""

    state: str
    reason: str | None
    nodes: str | None
    submitted_s: float | None
    """Epoch seconds Slurm submitted the job (None: not given)."""
    started_s: float | None
    """Epoch seconds the job started; None while it has not (squeue's expected start
    time of a pending job is not taken)."""


def slurm_time(text: str) -> float | None:
    """Slurm's ``2026-11-26T16:20:13`` (this host's local time) as epoch seconds."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None  # N/A, Unknown, None


def parse_squeue_jobs(out: str) -> dict[str, JobInfo]:
    """Job id -> its :class:`JobInfo`, from ``squeue -h -o`` :data:`SQUEUE_FORMAT`."""
    jobs: dict[str, JobInfo] = {}
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6 or not fields[0]:
            continue
        job_id, state, reason, nodes, submitted, started = fields
        state = state.split()[0] if state.split() else ""
        jobs[job_id] = JobInfo(
            state, None if reason in ("", "None", "(null)") else reason,
            None if nodes in ("", "(null)", "None") else nodes, slurm_time(submitted),
            None if state in PENDING_STATES else slurm_time(started))
    return jobs


Answer = JobInfo | None | bool
"""A poll's answer for one job: its info; None when Slurm no longer lists it (ended
over ``MinJobAge`` ago); False when ``squeue`` could not answer this time."""


class SqueuePoller:
    """Asks ``squeue`` about every watched job at once, as long as any is watched."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = dict(env)
        self._watched: dict[str, int] = {}  # job id -> its watchers
        self._answers: dict[str, Answer] = {}
        self._round = 0
        self._done = asyncio.Condition()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.calls = 0
        """``squeue`` calls made (for tests and the back-off's proof)."""
        self.interval_s = POLL_S
        """The wait before the next poll."""

    def watch(self, job_id: str) -> None:
        """Include ``job_id`` in every poll until :meth:`unwatch`."""
        self._watched[job_id] = self._watched.get(job_id, 0) + 1
        self.kick()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop())

    def unwatch(self, job_id: str) -> None:
        """Stop asking about ``job_id`` (the loop ends with the last job)."""
        left = self._watched.get(job_id, 0) - 1
        if left > 0:
            self._watched[job_id] = left
        else:
            self._watched.pop(job_id, None)
            self._answers.pop(job_id, None)

    def kick(self) -> None:
        """Poll now and at :data:`POLL_S` again (something changed: a start, a cancel)."""
        self.interval_s = POLL_S
        self._wake.set()

    async def next(self, job_id: str) -> Answer:
        """The job's answer from the next poll that includes it (watch it first)."""
        async with self._done:
            seen = self._round
            await self._done.wait_for(lambda: self._round > seen and job_id in self._answers)
            return self._answers[job_id]

    async def _loop(self) -> None:
        while self._watched:
            # Cleared before the call: a kick during it (a cancel, a new job) brings the
            # next poll at once instead of being lost.
            self._wake.clear()
            ids = sorted(self._watched, key=lambda j: (len(j), j))
            got = await self._poll(ids)
            async with self._done:
                for job_id in ids:
                    self._answers[job_id] = False if got is None else got.get(job_id)
                self._round += 1
                self._done.notify_all()
            waiting = got is not None and all(
                isinstance(a, JobInfo) and a.state in PENDING_STATES for a in got.values()
            ) and len(got) == len(ids)
            # doubled only while everything waits in the queue; any other answer resets it
            self.interval_s = min(self.interval_s * 2, BACKOFF_MAX_S) if waiting else POLL_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)

    async def _poll(self, ids: list[str]) -> dict[str, JobInfo] | None:
        self.calls += 1
        rc, out, err = await run_slurm_cmd("squeue", "-h", "-t", "all", "-j", ",".join(ids),
                                           "-o", SQUEUE_FORMAT, env=self._env,
                                           timeout_s=30.0)
        if rc == 0:
            return parse_squeue_jobs(out)
        # Every listed job forgotten: squeue refuses the whole list. Any other failure
        # (slurmctld busy or restarting) is asked again.
        return {} if "invalid job id" in err.lower() else None


_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                    dict[tuple[str | None, ...], SqueuePoller]] = \
    weakref.WeakKeyDictionary()


def poller_for(env: Mapping[str, str]) -> SqueuePoller:
    """The engine's one poller for jobs of this cluster (this event loop, and the same
    ``SLURM_CONF``, ``SLURM_CLUSTERS`` and ``PATH``, which decide whom ``squeue`` asks)."""
    loop = asyncio.get_running_loop()
    mine = _POLLERS.setdefault(loop, {})
    key = (env.get("SLURM_CONF"), env.get("SLURM_CLUSTERS"), env.get("PATH"))
    if key not in mine:
        mine[key] = SqueuePoller(env)
    return mine[key]
