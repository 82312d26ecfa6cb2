"""The Slurm executor: one run is one Slurm job, watched from the login host (docs/cluster.md).

:func:`supervise_slurm` is the Slurm twin of :func:`dltop.jobs.supervisor.supervise`: it
returns the same :class:`~dltop.jobs.supervisor.ChildOutcome`, classified by the same
rules, so the engine stores, retries and reports a Slurm run like a local one. It
writes the run's scripts (:mod:`dltop.jobs.executors.slurm_script`), submits ``batch.sh`` with
``sbatch --parsable`` (inside an ``salloc`` allocation, when ``SLURM_JOB_ID`` is set,
it runs ``batch.sh`` itself, whose ``srun`` makes a step of that allocation), tails the
events file the runner appends on the shared filesystem, and follows the job's state
through the engine's one ``squeue`` poller (:mod:`dltop.jobs.executors.slurm_batch`,
:mod:`dltop.jobs.executors.slurm_poll`), which asks about all of its jobs at once and
backs off while they are pending.

Not ``sbatch --wait``: it polls the controller itself with a back-off of up to half a
minute, so a run's end would be seen late, and dltop polls anyway for the queue's
``PENDING`` state and its reason.

The deadline (``timeout_s``) counts from the moment the job runs: time spent pending
in the queue is the cluster's, not the run's. Cancel and timeout call ``scancel`` and
wait for the job to leave the running states.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from dltop.catalog import ErrorKind, RunStatus
from dltop.jobs import agentfeed
from dltop.jobs.eventreader import EventHandler, EventReader, classify_outcome
from dltop.jobs.executors.slurm_batch import LIVE_STATES, BatchWatch, iso_utc, start_watch
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_query import (
    cores_per_gpu,
    failed_nodes,
    read_job_env,
    read_start_failure,
    run_slurm_cmd,
)
from dltop.jobs.executors.slurm_script import (
    batch_script,
    node_script,
    sbatch_argv,
)
from dltop.jobs.executors.slurm_step import StateHandler
from dltop.jobs.supervisor import ChildOutcome
from dltop.procs import read_log_tail
from dltop.profiles.jobspec import JobSpec

POLL_S = 1.0
"""How often the job's state is asked of the controller."""
TAIL_S = 0.25
"""How often the events file is read."""
NODE_FAILURES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "DEADLINE"})
"""Ends that are the cluster's doing: the run is ``crashed`` with the Slurm state."""

AgentPoll = Callable[[bool], Awaitable[None]]
"""Awaited every :data:`POLL_S` while the job runs with False, and once with True after it
ended: where the engine ingests the nodes' agent files (:func:`agent_ingestion`)."""


def cancel_orphan(job_id: str, env: Mapping[str, str]) -> str | None:
    """``scancel`` a batch job that a dead engine left running (``dltop run --resume``).

    Blocking (resume runs before the engine's loop, in no event loop). Returns None when
    Slurm took the cancel, else why not (the job goes on: the user is told its id).
    """
    rc, out, err = asyncio.run(run_slurm_cmd("scancel", job_id, env=env))
    return None if rc == 0 else f"scancel {job_id} failed: {(err or out).strip()}"


def is_orphan_job(pid: int | None, job_id: str | None, state: str | None) -> bool:
    """A run's Slurm batch job that may still hold its allocation: submitted (a step's
    srun is a local process, ``pid``, reaped as one) and not seen to end."""
    return bool(job_id) and not pid and (state is None or state in LIVE_STATES)


def write_file(path: Path, text: str, mode: int) -> None:
    # Never through a planted link, never over an existing file (as jobs.rundir does).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def write_scripts(job: JobSpec, run_id: int, runner_argv: Sequence[str],
                  files: SlurmFiles, cpus_per_gpu: int | None = None,
                  node: str | None = None) -> None:
    """Write ``batch.sh``, ``node.sh`` and the empty ``events.jsonl`` into the run folder."""
    write_file(files.batch_path, batch_script(job, run_id, files, cpus_per_gpu, node),
                0o700)
    write_file(files.node_path, node_script(job, runner_argv, files), 0o700)
    write_file(files.events_path, "", 0o600)


def agent_ingestion(run_dir: Path, store: Callable[[agentfeed.NodeSamples], None]) -> AgentPoll:
    """The :data:`AgentPoll` that follows the run's agent files and hands each node's new
    windows to ``store`` (e.g. ``Store.telemetry.add_agent_samples`` on the writer)."""
    feed = agentfeed.AgentFeed(run_dir)

    async def poll(final: bool) -> None:
        for got in await asyncio.to_thread(feed.drain if final else feed.poll):
            store(got)

    return poll


class Tail:
    """Feeds the bytes appended to the events file to the event reader
    (``on_first``: called once, at its first bytes)."""

    def __init__(self, path: Path, reader: EventReader) -> None:
        self._path, self._reader = path, reader
        self._pos = 0
        self.on_first: Callable[[], None] | None = None

    def read(self) -> None:
        try:
            with open(self._path, "rb") as f:
                f.seek(self._pos)
                chunk = f.read()
        except OSError:
            return
        if chunk and not self._pos and self.on_first is not None:
            self.on_first()
        self._pos += len(chunk)
        self._reader.feed(chunk)

    def finish(self) -> None:
        self.read()
        self._reader.finish()

    async def follow(self) -> None:
        while True:
            self.read()
            await asyncio.sleep(TAIL_S)


async def supervise_slurm(
    job: JobSpec,
    run_id: int,
    runner_argv: Sequence[str],
    *,
    files: SlurmFiles,
    env: Mapping[str, str],
    on_event: EventHandler,
    stop: asyncio.Event,
    on_state: StateHandler,
    on_agent_poll: AgentPoll | None = None,
    outer_job: str | None = None,
    node: str | None = None,
) -> ChildOutcome:
    """Run one run as one Slurm job to its end.

    Args:
        job: the job (its ``nodes``, ``timeout_s`` and ``[slurm]`` table).
        run_id: names the Slurm job ``dltop-<run_id>``.
        runner_argv: the runner's argv on one node (interpreter, script, spec).
        files: the run folder's paths; it must be visible from the compute nodes.
        env: the environment the job starts with (``sbatch`` exports it).
        on_event: called with each decoded protocol event, in order.
        stop: when set, the run is cancelled (``scancel``).
        on_state: called with runs columns as the job's Slurm facts become known.
        on_agent_poll: the agents' ingestion hook (see :data:`AgentPoll`).
        outer_job: the allocation this engine runs in (``salloc``): the run is a step
            of it (:class:`StepWatch`); None submits a batch job (:class:`BatchWatch`).
        node: the node the step must run on (a server group's run: its server's).

    Returns:
        The classified outcome; the Slurm job has ended when this returns (or dltop
        gave up waiting for it after ``scancel``, which the message says).
    """
    env = dict(env)
    if job.device.kind == "gpu":
        env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm sets it from --gpus-per-node
    t0 = time.monotonic()
    per_gpu = await cores_per_gpu(job, env)
    try:
        write_scripts(job, run_id, runner_argv, files, per_gpu, node)
    except OSError as exc:
        return ChildOutcome(RunStatus.CRASHED,
                            message=f"cannot write the Slurm scripts in {files.dir}: {exc}")
    reader = EventReader(on_event)
    tail = Tail(files.events_path, reader)
    follower = asyncio.create_task(tail.follow())
    agents = None if on_agent_poll is None else asyncio.create_task(_every_poll(on_agent_poll))
    try:
        watch = await start_watch(outer_job, files, env, sbatch_argv(job, run_id, files,
                                                                     per_gpu))
        if isinstance(watch, str):
            return ChildOutcome(RunStatus.CRASHED, message=watch)
        if isinstance(watch, BatchWatch):
            tail.on_first = watch.output_seen
        # The log path as a local run records it at spawn (dltop log, the log viewer).
        on_state({"slurm_job_id": watch.job_id, "log_path": str(files.log_path),
                  **({"submitted_at": iso_utc(watch.submitted_s)}
                     if isinstance(watch, BatchWatch) else {})})
        reason, note = await watch.run(job.timeout_s, stop, on_state)
    finally:
        for task in (follower, agents):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    await asyncio.sleep(TAIL_S)  # a shared filesystem may show the last lines late
    tail.finish()
    if on_agent_poll is not None:
        await on_agent_poll(True)
    status, kind, message = classify(reason, watch.state, watch.reason, watch.job_id,
                                     watch.exit_code, reader, job.timeout_s)
    setup_failed = None
    if reason is None and status != RunStatus.OK \
            and watch.state not in (*NODE_FAILURES, "TIMEOUT", "CANCELLED"):
        setup_failed = read_start_failure(files, job, watch.exit_code)
    if setup_failed is not None:
        status, kind, message = RunStatus.SETUP_FAILED, None, setup_failed
    elif watch.state in NODE_FAILURES and watch.nodes and reader.error is None:
        message = f"{message} on {await failed_nodes(watch.nodes, env)}"
    if note:
        message = f"{message}; {note}" if message else note
    return ChildOutcome(
        status=status, exit_code=watch.exit_code, pid=watch.pid, pgid=watch.pid,
        # a batch job's from its start in Slurm: its time pending is runs.queue_s
        wall_s=watch.wall_s if isinstance(watch, BatchWatch) else time.monotonic() - t0,
        message=message, error_kind=kind,
        protocol_errors=reader.protocol_errors, protocol_note=reader.protocol_note,
        profile_refused=reader.profile_refused,
        log_tail=read_log_tail(files.log_path) if status != RunStatus.OK else "",
        hello=reader.hello, model=reader.model, job_env=read_job_env(files))


def classify(reason: RunStatus | None, state: str | None, slurm_reason: str | None,
             job_id: str, exit_code: int | None, reader: EventReader,
             timeout_s: float) -> tuple[RunStatus, str | None, str | None]:
    """A Slurm run's (status, error kind, message): the local rules, then Slurm's end state.

    ``reason``: CANCELLED or TIMEOUT when dltop ended the job, else None.
    """
    status, kind, message = classify_outcome(reason, exit_code, reader, timeout_s)
    if reason is not None:
        return status, kind, message
    if state in NODE_FAILURES and reader.error is None:
        message = f"Slurm job {job_id} ended {state}"
        if slurm_reason and slurm_reason != "None":
            message += f" ({slurm_reason})"
        return RunStatus.CRASHED, None, message
    if state == "OUT_OF_MEMORY" and reader.error is None:
        # the job's memory limit (--mem), enforced by Slurm: the host's memory, not a GPU's
        return (RunStatus.OOM, ErrorKind.OOM,
                f"Slurm job {job_id} ran out of memory (OUT_OF_MEMORY)")
    if state == "TIMEOUT":
        return RunStatus.TIMEOUT, None, f"Slurm job {job_id} reached its time limit (TIMEOUT)"
    if state == "CANCELLED" and status != RunStatus.OK:
        return RunStatus.CANCELLED, None, f"Slurm job {job_id} was cancelled outside dltop"
    if status == RunStatus.CRASHED and state:
        message = f"{message} (Slurm job {job_id} {state})"
    return status, kind, message


async def _every_poll(poll: AgentPoll) -> None:
    while True:
        await poll(False)
        await asyncio.sleep(POLL_S)
