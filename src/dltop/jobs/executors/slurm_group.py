"""One server per configuration group on Slurm (``server_scope = "group"``, issue 41
items 5 and 7; docs/cluster.md#serve-jobs).

The group's first run submits a batch job of its own, the group's allocation: its
script (``server/batch.sh`` in that run's folder) runs the profile's ``setup`` lines,
then ``openai_server.py`` as the local executor's host does (:mod:`dltop.jobs.servergroup`)
on the allocated node and GPUs, in a session of its own that the script ends (TERM,
then KILL: :func:`~dltop.jobs.executors.slurm_serve.runner_block`) when Slurm signals it.
Its ``server`` event, written to ``server/events.jsonl``, says the server is ready. Each
run of the group then runs as a step of that job (:class:`SlurmStepExecutor` with the
job's id: ``batch.sh`` here, its ``srun`` a step there), its client at ``127.0.0.1`` on
the node, one run at a time. The job is ``scancel``\\ ed when the group ends (the
local executor's rules), whatever ends it.

Should the engine die, the host sees its heartbeat file (``server/alive``, rewritten every
:data:`HEARTBEAT_S`) stop changing and stops the server: the job ends then, not at
its time limit. The job's time limit is the ``[slurm]`` table's ``time`` (for the whole
group, not one run), else the partition's default.

Inside an ``salloc`` (the step executor) the server is a step of the engine's own
allocation: ``server/batch.sh`` runs here (:class:`StepWatch`), its ``srun --overlap``
runs ``server/node.sh`` (the host); the runs' steps are pinned to the server's node
(``--nodelist``). ``--overlap``: the server's step would hold the allocation's CPUs,
GPUs and memory for the whole group, and every run's step would wait for its end.

Should the engine die, ``server/step`` (:data:`STEP_FILE`, removed when the host ends)
still names the group's batch job, or the server step's ``srun`` (a local process in a
session of its own) and the step, and ``dltop run --resume`` ends them
(:func:`reap_server_steps`) rather than leave them to the heartbeat.

With pyxis each run starts its own server: pyxis puts steps in the image, never a
batch script, so the group job's host would run outside it (an salloc's server step
could take the image: untested here, no pyxis).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dltop.catalog import ErrorKind, RunStatus
from dltop.jobs.eventreader import EventReader
from dltop.jobs.executors.base import RunExecutor
from dltop.jobs.executors.slurm import Tail, cancel_orphan, write_file
from dltop.jobs.executors.slurm_batch import BatchWatch, iso_utc, start_watch
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_guard import STEP_UNSET_VARS, setup_lines
from dltop.jobs.executors.slurm_query import cores_per_gpu, run_slurm_cmd
from dltop.jobs.executors.slurm_run import SLURM_BATCH, SlurmStepExecutor
from dltop.jobs.executors.slurm_script import runner_command, sbatch_argv, srun_argv
from dltop.jobs.executors.slurm_serve import runner_block
from dltop.jobs.servergroup import HOST_TIMEOUT_S, HostLaunch, Key, group_key
from dltop.jobs.supervisor import ChildOutcome, reap_orphan_group
from dltop.procs import read_log_tail
from dltop.profiles.jobspec import JobSpec
from dltop.textsafe import one_line

SERVER_DIR = "server"
"""The group's job's folder, inside its first run's (apart from that run's own files)."""
HEARTBEAT_S = 5.0
"""How often the engine touches ``server/alive`` (the host gives up after 60 s)."""
STEP_FILE = "step"
"""In :data:`SERVER_DIR` while the group's host runs (JSON): its batch job (``job``), or
inside an salloc the allocation (``job``), the step's ``name`` and its srun's local
process (``pid``, ``pgid``, ``proc_start_time``, as a run's row records a step's)."""
LOST_ENV = "DLTOP_SERVER_HEARTBEAT_LOST_S"
"""The host's heartbeat limit's override (runners/child/openai_server.py's test hook),
passed into the job script when set here."""


def shared_host(job: JobSpec, run_id: int, executor: RunExecutor,
                gpus: Sequence[int]) -> tuple[Key | None, HostLaunch | None]:
    """The group key of a run and where its group's server runs: (None, None) when the
    run starts its own server (or needs none), ``launch`` None for the local host."""
    key = group_key(job, gpus)
    if key is None or executor.name == "local":
        return key, None
    s = job.slurm
    if s is not None and s.container and s.container_runtime == "pyxis":
        return None, None
    if executor is SLURM_BATCH:
        outer = None
    elif isinstance(executor, SlurmStepExecutor) and executor.outer_job:
        outer = executor.outer_job  # inside an salloc: the server is a step of it
    else:
        return None, None
    # the allocation is part of the server's identity on Slurm
    return key.extended(job.device, s), _launcher(job, run_id, outer)


def step_executor(served: Mapping[str, Any] | None, executor: RunExecutor,
                  env: dict[str, str]) -> RunExecutor:
    """The executor of a run that uses its group's Slurm job: a step of that job, on
    the node its server runs on."""
    if not served or not served.get("slurm_job"):
        return executor
    env["SLURM_JOB_ID"] = env["SLURM_JOBID"] = str(served["slurm_job"])
    node = str(served.get("slurm_nodes") or "") or None
    if node:
        env["SLURM_JOB_NODELIST"] = node
    return SlurmStepExecutor(str(served["slurm_job"]), group=True, node=node)


def unstarted(served: Mapping[str, Any] | None, cancel: asyncio.Event, remote: bool,
              server_log: Path) -> ChildOutcome | None:
    """The outcome of a run of a Slurm group whose server did not start (None: it did,
    or the run is local): it ends at once, nothing submitted (a local run's runner
    reports the same failure itself)."""
    if not remote or not served or "failed" not in served:
        return None
    if cancel.is_set():
        return ChildOutcome(RunStatus.CANCELLED, message=str(served["failed"]))
    return ChildOutcome(RunStatus.SETUP_FAILED, message=str(served["failed"]),
                        error_kind=ErrorKind.SETUP, log_tail=read_log_tail(server_log))


def server_script(job: JobSpec, run_id: int, host_argv: Sequence[str], files: SlurmFiles,
                  heartbeat: Path, srun: Sequence[str] | None = None) -> str:
    """``server.sh``: setup lines, then the host in a session ended on Slurm's signal;
    with ``srun`` (inside an salloc) that step runs the host (:func:`host_script`)."""
    lines = ["#!/bin/bash",
             f"# dltop: the shared server of run {run_id}'s group: "
             f"{one_line(job.describe())} (generated; see docs/cluster.md)",
             "set -e", *setup_lines(job.slurm.setup if job.slurm else (), files), "set +e",
             f"unset {' '.join(STEP_UNSET_VARS)}"]
    if srun is None:
        return "\n".join([*lines, *_host_lines(job, host_argv, files, heartbeat)]) + "\n"
    node = shlex.quote(str(files.node_path))
    return "\n".join([*lines, f"exec {shlex.join(srun)} /bin/bash {node}"]) + "\n"


def host_script(job: JobSpec, host_argv: Sequence[str], files: SlurmFiles,
                heartbeat: Path) -> str:
    """``node.sh`` of a server that is a step of the engine's allocation."""
    return "\n".join(["#!/bin/bash", *_host_lines(job, host_argv, files, heartbeat)]) + "\n"


def _host_lines(job: JobSpec, host_argv: Sequence[str], files: SlurmFiles,
                heartbeat: Path) -> list[str]:
    return [f"exec 3>>{shlex.quote(str(files.events_path))}",
            "export DLTOP_EVENT_FD=3 PYTHONUNBUFFERED=1 PYTHONIOENCODING=utf-8",
            f"export DLTOP_SERVER_HEARTBEAT={shlex.quote(str(heartbeat))}",
            *([f"export {LOST_ENV}={shlex.quote(os.environ[LOST_ENV])}"]
              if os.environ.get(LOST_ENV) else []),
            *runner_block(job, runner_command(job, host_argv)),
            'exit "$status"']


def server_srun(job: JobSpec, run_id: int, per_gpu: int | None) -> list[str]:
    """The server's step inside an salloc: a run's step's shape (one task on one node,
    the job's CPUs and GPUs), named as the group's batch job is, and ``--overlap``: it
    shares the allocation with the runs' steps (module docstring)."""
    return [f"--job-name=dltop-server-{run_id}" if a.startswith("--job-name=") else a
            for a in srun_argv(job, run_id, per_gpu)] + ["--overlap"]


def _launcher(job: JobSpec, run_id: int, outer: str | None) -> HostLaunch:
    async def launch(argv: Sequence[str], log_path: Path, env: Mapping[str, str],
                     on_event: Callable[[dict[str, Any]], None],
                     on_spawn: Callable[[int, int], None],
                     stop: asyncio.Event) -> ChildOutcome:
        return await _run_host(job, run_id, [*argv, str(log_path)], log_path, env,
                               on_event, stop, outer)
    return launch


async def _run_host(job: JobSpec, run_id: int, argv: Sequence[str], log_path: Path,
                    env: Mapping[str, str], on_event: Callable[[dict[str, Any]], None],
                    stop: asyncio.Event, outer: str | None) -> ChildOutcome:
    """Submit the group's job, or run its step in the allocation ``outer``, and follow it
    to its end (``stop``: ``scancel``, or the step's TERM)."""
    files = SlurmFiles(log_path.parent / SERVER_DIR, Path(argv[2]), log_path)
    heartbeat = files.dir / "alive"
    env = dict(env)
    if job.device.kind == "gpu":
        env.pop("CUDA_VISIBLE_DEVICES", None)  # Slurm sets it from --gpus-per-node
    per_gpu = await cores_per_gpu(job, env)
    srun = None if outer is None else server_srun(job, run_id, per_gpu)
    try:
        os.mkdir(files.dir, 0o700)
        write_file(files.batch_path,
                   server_script(job, run_id, argv, files, heartbeat, srun), 0o700)
        if srun is not None:
            write_file(files.node_path, host_script(job, argv, files, heartbeat), 0o700)
        write_file(files.events_path, "", 0o600)
        write_file(heartbeat, "", 0o600)
    except OSError as exc:
        return ChildOutcome(RunStatus.CRASHED, message=f"cannot write the server's Slurm "
                            f"script in {files.dir}: {exc}")
    watch = await start_watch(outer, files, env, _submit_argv(job, run_id, files, per_gpu))
    if isinstance(watch, str):
        return ChildOutcome(RunStatus.CRASHED, message=watch)
    if isinstance(watch, BatchWatch):  # --resume scancels it if this engine dies
        _record(files, {"job": watch.job_id})
    ended = (f"the group's server step in Slurm job {outer}" if outer is not None
             else f"the group's Slurm job {watch.job_id}")
    ready: list[dict[str, Any]] = []  # the server event, held until the job's start is known

    def event(ev: dict[str, Any]) -> None:
        if ev.get("event") != "server":
            on_event(ev)
            return
        ready.append({**ev, "slurm_job": watch.job_id, "slurm_nodes": ev.get("nodes")})
        started({})

    def started(fields: Mapping[str, Any]) -> None:
        if fields.get("pid"):  # a step's srun, here: --resume ends it if this engine dies
            _record(files, {**{k: fields.get(k) for k in ("pid", "pgid", "proc_start_time")},
                            "job": outer, "name": f"dltop-server-{run_id}"})
        # the first run's row gets the group job's queue facts, as a batch run's own: a
        # server seen ready before the poll that shows the job running waits for it (a
        # step waits in no queue: its runs' queue_s is 0)
        if ready and isinstance(watch, BatchWatch):
            if watch.started_s is not None:
                on_event({**ready.pop(), "slurm_queue": queue_facts(watch)})
        elif ready:
            on_event(ready.pop())

    tail = Tail(files.events_path, EventReader(event))
    if isinstance(watch, BatchWatch):
        tail.on_first = watch.output_seen
    tasks = [asyncio.create_task(tail.follow()), asyncio.create_task(_beat(heartbeat))]
    try:
        await watch.run(HOST_TIMEOUT_S, stop, started)
    finally:
        with contextlib.suppress(OSError):  # its srun has ended (StepWatch waited for it)
            (files.dir / STEP_FILE).unlink()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    tail.finish()
    return ChildOutcome(RunStatus.CRASHED, watch.exit_code,
                        message=f"{ended} ended {watch.state or 'unseen'}")


def _submit_argv(job: JobSpec, run_id: int, files: SlurmFiles,
                 per_gpu: int | None) -> list[str]:
    """The group job's ``sbatch``: a run's, named for the server, with the ``[slurm]``
    table's ``time`` (for the whole group) or none (the partition's default)."""
    submit = [a for a in sbatch_argv(job, run_id, files, per_gpu)
              if not a.startswith("--time=")]
    submit = [f"--job-name=dltop-server-{run_id}" if a.startswith("--job-name=") else a
              for a in submit]
    if job.slurm is not None and job.slurm.time is not None:
        submit[1:1] = [f"--time={job.slurm.time}"]  # right after sbatch, as sbatch_argv's
    return submit


def queue_facts(watch: BatchWatch) -> dict[str, Any]:
    """The group job's ``runs`` columns of its time in Slurm's queue (its first run's)."""
    start = watch.started_s or watch.submitted_s
    return {"submitted_at": iso_utc(watch.submitted_s), "started_at": iso_utc(start),
            "queue_s": round(start - watch.submitted_s, 3)}


def queue_columns(served: Mapping[str, Any] | None) -> dict[str, Any]:
    """The queue facts of a run of a Slurm group: the first run's are its job's; a later
    run's step starts in the running allocation, so it waited 0 s ({} for other runs)."""
    if not served or not served.get("slurm_job"):
        return {}
    return dict(served.get("slurm_queue") or {"queue_s": 0.0})


async def _beat(path: Path) -> None:
    """Rewrite the heartbeat file (a new content each time: the host reads it)."""
    n = 0
    while True:
        n += 1
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.write(fd, f"{n}\n".encode())
            finally:
                os.close(fd)
        await asyncio.sleep(HEARTBEAT_S)


def _record(files: SlurmFiles, what: Mapping[str, Any]) -> None:
    with contextlib.suppress(OSError):
        write_file(files.dir / STEP_FILE, json.dumps(what), 0o600)


def reap_server_steps(run_dirs: Iterable[Path], env: Mapping[str, str]) -> tuple[int, list[str]]:
    r"""End the group servers' batch jobs and salloc steps a dead engine left (their
    ``server/step`` files, in the folders ``run_dirs`` of its Slurm runs), before
    their heartbeat would.

    A batch job is ``scancel``\ ed. A step's srun group is killed (recognised by its
    start time, as a run's is), and the step ``scancel``\ ed: a SIGKILLed srun leaves
    its step running (seen on Slurm 22.05). Blocking: resume runs before the engine's
    event loop.

    Returns:
        The processes killed, and what could not be ended (for the user to end).
    """
    killed, left = 0, []
    for run_dir in run_dirs:
        path = run_dir / SERVER_DIR / STEP_FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # none, or the server ended with its engine alive
        with os.fdopen(fd) as fh, contextlib.suppress(ValueError, KeyError, TypeError):
            got = json.loads(fh.read())
            if "pid" not in got:  # the group's batch job
                if why := cancel_orphan(str(got["job"]), env):
                    left.append(why)
            else:
                killed += reap_orphan_group(int(got["pid"]), int(got["pgid"]),
                                            got.get("proc_start_time"))
                if why := _cancel_step(str(got["job"]), str(got["name"]), env):
                    left.append(why)
        with contextlib.suppress(OSError):
            path.unlink()
    return killed, left


def _cancel_step(job: str, name: str, env: Mapping[str, str]) -> str | None:
    """``scancel`` the step ``name`` of the allocation ``job`` (None: gone, or ended).
    Blocking, as :func:`~dltop.jobs.executors.slurm.cancel_orphan`, which cancels it."""
    rc, out, err = asyncio.run(run_slurm_cmd("squeue", "-h", "-s", "-j", job, "-o", "%i %j",
                                             env=env))
    if rc != 0:
        return f"squeue of job {job} failed (exit {rc}): {(err or out).strip()}"
    for step in [line.split()[0] for line in out.splitlines() if line.split()[1:] == [name]]:
        if why := cancel_orphan(step, env):
            return f"{why} (step {name})"
    return None
