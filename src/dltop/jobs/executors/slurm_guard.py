"""The lines of a Slurm run's scripts that keep its setup setup and its step the shape
asked (pure; docs/cluster.md, docs/faults.md).

- ``batch.sh``: each ``setup`` line numbered under an ERR trap, a missing ``source``
  file checked explicitly, ``setup-done`` after the last; srun's input variables
  unset (:data:`STEP_UNSET_VARS`), so an outer allocation cannot reshape the step.
- ``node.sh``: ``step-started`` first, then the step's shape checked against the job
  (``step-shape``), then an Apptainer image started once (``container-failed``).

What these files say is read back by :mod:`dltop.jobs.executors.slurm_query`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.profiles.jobspec import JobSpec

STEP_UNSET_VARS = (
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS_PER_CORE",
    "SLURM_NTASKS_PER_SOCKET", "SLURM_NTASKS_PER_GPU", "SLURM_NTASKS_PER_TRES",
    "SRUN_CPUS_PER_TASK", "SLURM_CPUS_PER_GPU", "SLURM_GPUS", "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_SOCKET", "SLURM_GRES", "SLURM_STEP_GRES",
    "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_GPU", "SLURM_MEM_PER_NODE", "SLURM_DISTRIBUTION",
    "SLURM_DIST_PLANESIZE", "SLURM_EXACT", "SLURM_EXCLUSIVE", "SLURM_OVERLAP",
    "SLURM_OVERCOMMIT", "SLURM_HINT", "SLURM_THREADS_PER_CORE", "SLURM_CORE_SPEC",
    "SLURM_THREAD_SPEC", "SLURM_SPREAD_JOB", "SLURM_USE_MIN_NODES", "SLURM_THREADS",
    "SLURM_TIMELIMIT", "SLURM_WORKING_DIR", "SLURM_OPEN_MODE", "SLURM_STDOUTMODE",
    "SLURM_STDERRMODE", "SLURM_STDINMODE", "SLURM_NO_KILL", "SLURM_IMMEDIATE", "SLURM_WAIT",
    "SLURM_SIGNAL", "SLURM_DEPENDENCY", "SLURM_EXPORT_ENV", "SRUN_EXPORT_ENV",
    "SLURM_PROLOG", "SLURM_EPILOG", "SLURM_TASK_PROLOG", "SLURM_TASK_EPILOG",
    "SLURM_REMOTE_CWD", "SLURM_TEST_EXEC", "SRUN_CONTAINER", "SLURM_NETWORK",
    "SLURM_REQ_SWITCH", "SLURM_WAIT4SWITCH")
"""srun's input variables that would change the step's shape, placement, files or
lifetime: an outer allocation's (``salloc -n2``: ``SLURM_NTASKS=2``) or the site's. The
step's own srun options say all of it (:func:`dltop.jobs.executors.slurm_script.srun_argv`);
these are unset before it."""

SBATCH_UNSET_VARS = (
    "SBATCH_ARRAY_INX", "SBATCH_CONTAINER", "SBATCH_CORE_SPEC", "SBATCH_CPUS_PER_GPU",
    "SBATCH_DISTRIBUTION", "SBATCH_ERROR", "SBATCH_EXCLUSIVE", "SBATCH_GPUS",
    "SBATCH_GPUS_PER_NODE", "SBATCH_GPUS_PER_TASK", "SBATCH_GRES", "SBATCH_GRES_FLAGS",
    "SBATCH_HINT", "SLURM_HINT", "SBATCH_INPUT", "SBATCH_MEM_PER_CPU", "SBATCH_MEM_PER_GPU",
    "SBATCH_MEM_PER_NODE", "SBATCH_NETWORK", "SBATCH_NO_KILL", "SBATCH_OVERCOMMIT",
    "SBATCH_REQUEUE", "SBATCH_SIGNAL", "SBATCH_SPREAD_JOB", "SBATCH_THREAD_SPEC",
    "SBATCH_THREADS_PER_CORE", "SBATCH_USE_MIN_NODES", "SBATCH_WAIT", "SBATCH_WAIT_ALL_NODES",
    "SBATCH_REQ_SWITCH", "SBATCH_WAIT4SWITCH", "SBATCH_DELAY_BOOT", "SBATCH_GET_USER_ENV")
"""sbatch's input variables that would change the job's shape, placement, files or
lifetime where dltop's own options do not say (``SBATCH_ARRAY_INX=0-999`` makes an array
of it): taken out of the environment sbatch runs in. The site's defaults that the
allow-list and the ``[slurm]`` keys also set (partition, account, qos, reservation,
constraint) stay."""


def sbatch_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without :data:`SBATCH_UNSET_VARS`: what ``sbatch`` runs with."""
    return {k: v for k, v in env.items() if k not in SBATCH_UNSET_VARS}


_SOURCE = re.compile(r"^\s*(?:source|\.)\s+(\"[^\"`]*\"|'[^']*'|[^\s;&|<>()`'\"]+)"
                     r"(?:\s+[^;&|<>()`]*)?$")
"""A setup line that only sources a file (``source venv/bin/activate``): the file is
checked before, since bash under ``set -e`` exits on a missing one without the ERR trap."""


def setup_lines(setup: Sequence[str], files: SlurmFiles) -> list[str]:
    """The profile's ``setup`` lines, each numbered, stopping at the first that fails.

    The ERR trap writes ``<line> <status>`` to ``setup-failed`` before ``set -e`` ends
    the script: the engine reports the run ``setup_failed`` with that line, not as a
    crash of the runner (which never started). A missing ``source`` file is checked
    explicitly (bash ends the script there without running the trap), and
    ``setup-done``, written after the last line, tells any other early end from the
    step's.
    """
    if not setup:
        return []
    failed = shlex.quote(str(files.setup_failed_path))
    out = [f"trap 'printf \"%s %s\\n\" \"$DLTOP_SETUP_LINE\" \"$?\" > {failed}' ERR"]
    for i, line in enumerate(setup, 1):
        out.append(f"DLTOP_SETUP_LINE={i}")
        m = _SOURCE.match(line)
        if m is not None and "$(" not in line:
            # A path with a slash is opened as is (none: bash searches PATH, then ".").
            out += [f"DLTOP_SOURCE_FILE={m.group(1)}",
                    'if [[ "$DLTOP_SOURCE_FILE" == */* && ! -r "$DLTOP_SOURCE_FILE" ]]; then',
                    f'    printf "%s 1 %s\\n" {i} "$DLTOP_SOURCE_FILE" > {failed}',
                    f'    echo "dltop: setup line {i}: no such file: $DLTOP_SOURCE_FILE" >&2',
                    "    exit 1",
                    "fi"]
        out.append(line)
    return [*out, "trap - ERR", f": > {shlex.quote(str(files.setup_done_path))}"]


def apptainer_argv(job: JobSpec, runner_argv: Sequence[str]) -> list[str]:
    # The runner alone in the image (the agent stays on the node); --nv brings the
    # node's GPU driver in, the run folder is bound at its own path.
    assert job.slurm is not None and job.slurm.container is not None
    return ["apptainer", "exec", *(["--nv"] if job.device.kind == "gpu" else []),
            "--bind", str(Path(runner_argv[2]).parent), job.slurm.container]


def step_check_lines(job: JobSpec, files: SlurmFiles) -> list[str]:
    """The step is the shape asked (one task on each of ``nodes`` nodes), or no runner
    starts: the first task writes ``<tasks> <nodes>`` to ``step-shape`` and every task
    exits 3. Outside Slurm (no ``SLURM_STEP_*``) the check passes. The first task
    first says the step started at all (``step-started``: its container ran)."""
    n = job.nodes
    shape = shlex.quote(str(files.step_shape_path))
    return ['if [ "${SLURM_PROCID:-0}" = 0 ]; then '
            f': > {shlex.quote(str(files.step_started_path))}; fi',
            f'if [ "${{SLURM_STEP_NUM_TASKS:-{n}}}" != {n} ] || '
            f'[ "${{SLURM_STEP_NUM_NODES:-{n}}}" != {n} ]; then',
            '    if [ "${SLURM_PROCID:-0}" = 0 ]; then',
            f'        echo "$SLURM_STEP_NUM_TASKS $SLURM_STEP_NUM_NODES" > {shape}',
            "    fi",
            f'    echo "dltop: the step has $SLURM_STEP_NUM_TASKS task(s) on '
            f'$SLURM_STEP_NUM_NODES node(s), not {n} on {n}: no runner started" >&2',
            "    exit 3",
            "fi"]


def container_check_lines(job: JobSpec, runner_argv: Sequence[str],
                          files: SlurmFiles) -> list[str]:
    """With Apptainer, the image must start on this node before the runner does: if it
    does not, ``<node> <status>`` goes to ``container-failed`` (the run is
    ``setup_failed``) and the task exits with that status."""
    s = job.slurm
    if s is None or not s.container or s.container_runtime != "apptainer":
        return []
    probe = shlex.join([*apptainer_argv(job, runner_argv), "true"])
    failed = shlex.quote(str(files.container_failed_path))
    return [f"{probe} >&2",
            "DLTOP_CONTAINER_STATUS=$?",
            'if [ "$DLTOP_CONTAINER_STATUS" != 0 ]; then',
            '    echo "${SLURMD_NODENAME:-$(hostname)} $DLTOP_CONTAINER_STATUS" >> ' + failed,
            '    exit "$DLTOP_CONTAINER_STATUS"',
            "fi"]
