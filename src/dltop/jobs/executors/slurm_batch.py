"""Following one submitted batch job to its end, through the engine's one poller.

:class:`BatchWatch` takes the job's state from the engine's
:class:`~dltop.jobs.executors.slurm_poll.SqueuePoller` (one ``squeue`` for all its jobs),
records when the job was submitted and when it started (``queue_s`` apart from the run
time), enforces ``timeout_s`` from the job's start, and once the job ended asks the
controller once for its exit code and accounting (``sacct``) for its MaxRSS, elapsed
time and energy (:mod:`dltop.jobs.executors.slurm_acct`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dltop.catalog import RunStatus
from dltop.jobs.executors.slurm_acct import job_usage
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_guard import sbatch_env
from dltop.jobs.executors.slurm_poll import PENDING_STATES, Answer, JobInfo, poller_for
from dltop.jobs.executors.slurm_query import job_state, run_slurm_cmd
from dltop.jobs.executors.slurm_step import StateHandler, StepWatch

CONTROLLER_SILENCE_S = 600.0
"""How long slurmctld may fail to answer before dltop stops watching the job."""
END_WAIT_S = 60.0
"""How long a cancelled job may take to leave the running states before dltop gives up."""
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                         "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                         "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
_NO_ANSWER = object()


def iso_utc(epoch_s: float) -> str:
    """Epoch seconds as the store's ISO-8601 UTC timestamps (``runs.started_at``)."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s))
            + f".{int(epoch_s * 1000) % 1000:03d}Z")


class BatchWatch:
    """Follows a submitted batch job until it leaves Slurm's live states.

    Args:
        job_id: the Slurm job.
        env: the environment Slurm's clients run with.
        submitted_s: epoch seconds just before ``sbatch`` (finer than Slurm's submit
            time, which is in whole seconds; its start time, also whole, is taken no
            earlier than this).
    """

    def __init__(self, job_id: str, env: Mapping[str, str], submitted_s: float) -> None:
        self.job_id, self._env = job_id, env
        self.state: str | None = None
        self.reason: str | None = None
        self.exit_code: int | None = None
        self.pid = 0
        self.nodes: str | None = None
        self.submitted_s = submitted_s
        self.started_s: float | None = None
        """Epoch seconds the job started running (Slurm's start time); None: it never ran."""
        self.ended_s: float | None = None
        self._poller = poller_for(env)

    @property
    def wall_s(self) -> float:
        """Seconds from the job's start to its end as seen here: no time pending."""
        if self.started_s is None:
            return 0.0
        return max(0.0, (self.ended_s or time.time()) - self.started_s)

    def output_seen(self) -> None:
        """The runner wrote its first events: the job runs, whatever the back-off said."""
        self._poller.kick()

    async def run(self, timeout_s: float, stop: asyncio.Event,
                  on_state: StateHandler) -> tuple[RunStatus | None, str | None]:
        """Watch to the end; (why dltop ended it, or None; a note when it could not)."""
        self._poller.watch(self.job_id)
        try:
            got = await self._follow(timeout_s, stop, on_state)
            await self._ended(on_state)
            return got
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel(on_state))
            raise
        finally:
            self._poller.unwatch(self.job_id)

    async def _follow(self, timeout_s: float, stop: asyncio.Event,
                      on_state: StateHandler) -> tuple[RunStatus | None, str | None]:
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        silent_since: float | None = None
        while True:
            answer = await self._answer(stop, deadline)
            if answer is None:  # forgotten by the controller: it ended long ago
                return None, None
            if answer is False:  # the controller is busy or restarting: ask again
                silent_since = silent_since or loop.time()
                if loop.time() - silent_since > CONTROLLER_SILENCE_S:
                    return None, (f"slurmctld gave no state of job {self.job_id} for "
                                  f"{CONTROLLER_SILENCE_S:g} s")
            elif isinstance(answer, JobInfo):
                silent_since = None
                self._take(answer, on_state)
                if self.started_s is not None and deadline is None:
                    # timeout_s counts from Slurm's start, even one seen late
                    deadline = loop.time() + timeout_s - max(0.0, time.time() - self.started_s)
                if self.state not in LIVE_STATES:
                    return None, None
            if stop.is_set():
                return RunStatus.CANCELLED, await self._cancel(on_state)
            if deadline is not None and loop.time() >= deadline:
                return RunStatus.TIMEOUT, await self._cancel(on_state)

    async def _answer(self, stop: asyncio.Event, deadline: float | None) -> Any:
        """The next poll's answer, or :data:`_NO_ANSWER` when a stop or the deadline
        came first."""
        nxt = asyncio.create_task(self._poller.next(self.job_id))
        stopper = asyncio.create_task(stop.wait())
        loop = asyncio.get_running_loop()
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            done, _ = await asyncio.wait({nxt, stopper}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not nxt.done():
                nxt.cancel()
        return nxt.result() if nxt in done else _NO_ANSWER

    def _take(self, info: JobInfo, on_state: StateHandler) -> None:
        fields: dict[str, Any] = {}  # one write: a reader never sees RUNNING without its start
        if (info.state, info.reason) != (self.state, self.reason):
            fields.update(slurm_state=info.state, slurm_reason=info.reason)
        self.state, self.reason = info.state, info.reason
        # Also once ended: a short job may go from PENDING to COMPLETED between polls.
        if info.nodes and info.nodes != self.nodes:
            self.nodes = fields["slurm_nodes"] = info.nodes
        if self.started_s is None and info.state not in PENDING_STATES:
            self._poller.kick()  # running: polled at the short interval again
            started = info.started_s or time.time()
            self.started_s = max(started, self.submitted_s)
            # The run's start is the job's, not its submission: its time in the queue
            # is kept apart (runs.queue_s), and started_at/wall_s exclude it.
            fields.update(started_at=iso_utc(self.started_s),
                          queue_s=round(self.started_s - self.submitted_s, 3))
        if fields:
            on_state(fields)

    async def _ended(self, on_state: StateHandler) -> None:
        """The job ended: its exit code (one ``scontrol``), then accounting (``sacct``)."""
        self.ended_s = time.time()
        if self.started_s is None:  # never ran (cancelled or failed while pending)
            on_state({"queue_s": round(self.ended_s - self.submitted_s, 3)})
        info = await job_state(self.job_id, self._env)
        if info:
            self._exit_code(info)
            if info.get("JobState") and info["JobState"] != self.state:
                self.state = info["JobState"]
                on_state({"slurm_state": self.state})
        on_state((await job_usage(self.job_id, self._env)).columns())

    def _exit_code(self, info: Mapping[str, str]) -> None:
        code, _, sig = info.get("ExitCode", "").partition(":")
        if code.isdigit():
            self.exit_code = -int(sig) if sig.isdigit() and int(sig) else int(code)

    async def _cancel(self, on_state: StateHandler) -> str | None:
        """``scancel`` the job and wait until it has ended (its final state reported)."""
        rc, _, err = await run_slurm_cmd("scancel", self.job_id, env=self._env)
        if rc != 0:
            return f"scancel {self.job_id} failed: {err.strip()}"
        deadline = time.monotonic() + END_WAIT_S
        while time.monotonic() < deadline:
            self._poller.kick()
            answer: Answer = await self._poller.next(self.job_id)
            if answer is None:
                return None
            if isinstance(answer, JobInfo):
                self.state = answer.state
                if self.state not in LIVE_STATES:
                    on_state({"slurm_state": self.state, "slurm_reason": None})
                    return None
            await asyncio.sleep(0.5)
        return f"Slurm job {self.job_id} still {self.state} {END_WAIT_S:g} s after scancel"


async def start_watch(outer: str | None, files: SlurmFiles, env: Mapping[str, str],
                      submit: Sequence[str]) -> BatchWatch | StepWatch | str:
    """Start a job and return its watch: a step of the allocation ``outer`` the engine
    runs in (``salloc``), else the batch job that ``submit`` (sbatch's argv) submits; or
    why sbatch refused it."""
    if outer is not None:
        return StepWatch(files, env, outer)
    submitted = time.time()
    rc, out, err = await run_slurm_cmd(*submit, env=sbatch_env(env))
    if rc != 0:
        return f"sbatch failed (exit {rc}): {err.strip() or out.strip()}"
    return BatchWatch(out.strip().split(";")[0], env, submitted)
