"""What dltop asks Slurm and reads of a job's run folder (docs/cluster.md).

The Slurm clients run here (:func:`run_slurm_cmd`), with the parsing of their answers
kept pure for the tests: the nodes' cores per GPU (``sinfo``, a GPU job's
``--cpus-per-task``), a NODE_FAIL job's failed nodes (``sinfo``), and the files
``batch.sh`` and ``node.sh`` leave in the run folder (a failed ``setup`` line, the
variables the runner had).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_partition import gres_gpus
from dltop.profiles.jobspec import JobSpec


async def run_slurm_cmd(*argv: str, env: Mapping[str, str],
                        timeout_s: float = 60.0) -> tuple[int, str, str]:
    """Run a Slurm client; (exit status, stdout, stderr); status 127 when it is missing."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env))
    except OSError as exc:
        return 127, "", f"cannot run {argv[0]}: {exc}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "", f"{argv[0]} did not answer within {timeout_s:g} s"
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def parse_cores_per_gpu(sinfo: str) -> int | None:
    """The fewest cores per GPU over the nodes of ``sinfo -h -N -o "%c %G"`` (CPUs, then
    generic resources such as ``gpu:4`` or ``gpu:a100:4(S:0-1)``); None without GPUs."""
    best: int | None = None
    for line in sinfo.splitlines():
        cpus, _, gres = line.strip().partition(" ")
        if not cpus.isdigit():
            continue
        gpus = gres_gpus(gres)
        if gpus:
            per = max(int(cpus) // gpus, 1)
            best = per if best is None else min(best, per)
    return best


async def cores_per_gpu(job: JobSpec, env: Mapping[str, str]) -> int | None:
    """A GPU job's nodes' cores per GPU (its partition's, from ``sinfo``), when its
    ``[slurm]`` table gives no ``cpus_per_task``; None otherwise or when Slurm cannot say.
    A ``cpus_per_gpu`` key (a system's, usually) answers without asking."""
    if job.device.kind != "gpu" or (job.slurm is not None and job.slurm.cpus_per_task):
        return None
    if job.slurm is not None and job.slurm.cpus_per_gpu:
        return job.slurm.cpus_per_gpu
    argv = ["sinfo", "-h", "-N", "-o", "%c %G"]
    if job.slurm is not None and job.slurm.partition:
        argv.append(f"--partition={job.slurm.partition}")
    rc, out, _ = await run_slurm_cmd(*argv, env=env, timeout_s=30.0)
    return parse_cores_per_gpu(out) if rc == 0 else None


def parse_failed_nodes(sinfo: str) -> list[str]:
    """The nodes ``sinfo -h -N -o "%N|%T|%E"`` shows down, drained or failing, each with
    its state and Slurm's reason (``n2 (down: Not responding)``)."""
    bad = []
    for line in sinfo.splitlines():
        name, _, rest = line.partition("|")
        state, _, why = rest.partition("|")
        if any(w in state.lower() for w in ("down", "drain", "fail", "not_responding", "*")):
            bad.append(f"{name} ({state}: {why})" if why and why != "none"
                       else f"{name} ({state})")
    return list(dict.fromkeys(bad))


async def failed_nodes(nodelist: str, env: Mapping[str, str]) -> str:
    """Which of a NODE_FAIL job's nodes failed: ``node n2 (down: Not responding)``, or
    the job's node(s) when none is down any more (a slurmd that registered again)."""
    rc, out, _ = await run_slurm_cmd("sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%T|%E",
                                     env=env, timeout_s=30.0)
    bad = parse_failed_nodes(out) if rc == 0 else []
    if bad:
        return f"node{'s' if len(bad) > 1 else ''} {', '.join(bad)}"
    if "," in nodelist or "[" in nodelist:
        return f"one of nodes {nodelist} (none is down any more)"
    return f"node {nodelist}"


def read_setup_failure(files: SlurmFiles, setup: Sequence[str]) -> str | None:
    """The message of a failed ``setup`` line (``batch.sh``'s report), None if none failed."""
    try:
        text = files.setup_failed_path.read_text()
    except OSError:
        return None
    num, _, rest = text.strip().partition(" ")
    rc, _, missing = rest.partition(" ")
    line = setup[int(num) - 1] if num.isdigit() and 0 < int(num) <= len(setup) else "?"
    if missing:  # a `source` line's file, checked before the line ran
        return f"setup line {num} failed: {line}: no such file {missing}"
    return f"setup line {num} failed (exit {rc or '?'}): {line}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def read_start_failure(files: SlurmFiles, job: JobSpec, exit_code: int | None) -> str | None:
    """Why a job that did not end ok never started its runner, from what its scripts
    left (:mod:`dltop.jobs.executors.slurm_guard`); None when it did start it.

    In order: a setup line that failed (:func:`read_setup_failure`); a step of another
    shape than asked; an Apptainer image that did not start; a pyxis step that never
    ran ``node.sh`` (its container did not start); setup lines that ended the script
    without the ERR trap.
    """
    s = job.slurm
    setup = s.setup if s is not None else ()
    failed = read_setup_failure(files, setup)
    if failed is not None:
        return failed
    shape = _read(files.step_shape_path)
    if shape is not None:
        tasks, _, nodes = shape.partition(" ")
        return (f"the step had {tasks or '?'} task(s) on {nodes or '?'} node(s), not "
                f"{job.nodes} on {job.nodes} as asked: no runner started")
    code = "?" if exit_code is None else exit_code
    container = _read(files.container_failed_path)
    if container is not None and s is not None:
        node, _, rc = container.splitlines()[0].partition(" ")
        return (f"the container {s.container} did not start on {node} (apptainer exec "
                f"exit {rc or '?'}; see the job's log)")
    started = files.step_started_path.exists()
    if exit_code in (None, 0):  # the script's own end, not one in its setup or srun
        return None
    if s is not None and s.container and s.container_runtime == "pyxis" and not started \
            and (not setup or files.setup_done_path.exists()):
        return (f"the container {s.container} did not start (pyxis: srun exit {code}; "
                "see the job's log)")
    if setup and not started and not files.setup_done_path.exists():
        return (f"the setup lines ended the job (exit {code}) before its step: a line bash "
                "ends the script on without its ERR trap (e.g. source of a missing file)")
    return None


def read_job_env(files: SlurmFiles) -> dict[str, str] | None:
    """The variables the first node's runner started with (``node.sh``'s report)."""
    try:
        text = files.job_env_path.read_text(errors="replace")
    except OSError:
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_job(text: str) -> dict[str, str]:
    """``scontrol show job -o`` output as a dict (``JobState``, ``Reason``, ``NodeList``...)."""
    out: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


async def job_state(job_id: str, env: Mapping[str, str]) -> dict[str, str] | None:
    """The job as the controller sees it; None once it has forgotten it (it ended over
    ``MinJobAge`` ago); an empty dict when the controller could not answer this time."""
    rc, out, err = await run_slurm_cmd("scontrol", "show", "job", "-o", job_id, env=env,
                                       timeout_s=30.0)
    if rc == 0 and out.strip():
        return parse_job(out)
    return None if "invalid job id" in err.lower() else {}
