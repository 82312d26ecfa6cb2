"""The files and commands that turn one run into one Slurm job (pure; docs/cluster.md).

A run on the Slurm executor is two scripts in its private folder (:mod:`dltop.jobs.rundir`),
which must lie on a filesystem the compute nodes see:

- ``batch.sh``, what ``sbatch`` submits (or what runs inside an ``salloc`` allocation):
  the profile's ``setup`` lines, then one ``srun`` step with one task per node;
- ``node.sh``, what that step runs on every node: ``dltop agent`` in the background,
  then the runner (PyTorch under torchrun when the job spans nodes; TensorFlow one
  worker per node, exchanging ports through the run folder) with
  the protocol's event descriptor (``DLTOP_EVENT_FD``) opened on ``events.jsonl``.

Why a file for the events and not a pipe: the engine stays on the login host while the
runner lives on a compute node, and ``sbatch`` gives no stream back from the job. A file
on the shared filesystem, appended by the runner and tailed by the engine
(:mod:`dltop.jobs.executors.slurm`), is the one channel every cluster has. Only the first node's
runner writes it; the others' descriptor points at ``/dev/null``.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from dltop import catalog

# The run folder's files, where the executor's modules have always found them.
from dltop.jobs.environment import THREAD_VARS
from dltop.jobs.executors.slurm_files import (
    SlurmFiles,
)
from dltop.jobs.executors.slurm_guard import (
    STEP_UNSET_VARS,
    apptainer_argv,
    container_check_lines,
    setup_lines,
    step_check_lines,
)
from dltop.jobs.executors.slurm_serve import runner_block
from dltop.profiles.jobspec import JobSpec
from dltop.runners.launchers import torchrun_argv
from dltop.textsafe import one_line

REPORTED_VARS = (*THREAD_VARS, "CUDA_VISIBLE_DEVICES", "SLURM_CPUS_PER_TASK",
                 "SLURM_JOB_NODELIST", "SLURM_STEP_ID")
"""The thread variables dltop sets (jobs.environment.THREAD_VARS) and what Slurm gave
(the step's id: a server group's run takes its accounting from its step)."""
EVENT_FD = 3
TIME_MARGIN_MIN = 2
"""Minutes added to ``timeout_s`` for Slurm's own limit: dltop's deadline comes first,
and Slurm's backs it up should the engine die."""
TORCH_PORT_BASE = 29500
AGENT_HZ = 10.0


def time_limit(job: JobSpec) -> str:
    """``--time``: the ``[slurm]`` table's ``time``, else ``timeout_s`` in minutes plus a margin."""
    if job.slurm is not None and job.slurm.time is not None:
        return job.slurm.time
    return str(math.ceil(job.timeout_s / 60) + TIME_MARGIN_MIN)


def job_name(run_id: int) -> str:
    return f"dltop-{run_id}"


def sbatch_argv(job: JobSpec, run_id: int, files: SlurmFiles,
                cpus_per_gpu: int | None = None) -> list[str]:
    """The ``sbatch`` command that submits ``batch.sh`` (returns at once with the job id).

    ``cpus_per_gpu``: the nodes' cores per GPU (:func:`dltop.jobs.executors.slurm.cores_per_gpu`),
    the ``--cpus-per-task`` of a GPU job whose ``[slurm]`` table gives none.
    """
    s = job.slurm
    # The user's options first: where one names what dltop sets too, dltop's (later) wins.
    argv = ["sbatch", *(s.extra_args if s else ()), "--parsable", f"--nodes={job.nodes}",
            f"--ntasks={job.nodes}", "--ntasks-per-node=1",
            f"--job-name={job_name(run_id)}", f"--output={files.log_path}",
            "--open-mode=append", f"--chdir={files.dir}", f"--time={time_limit(job)}",
            # A job Slurm requeued would run again into the same run; dltop's own
            # retries (the job's `retries`) start a new run instead.
            "--no-requeue",
            # The engine's environment (thread variables, PATH, the interpreter's) is
            # the run's: explicit, so a site's SBATCH_EXPORT=NONE cannot drop it.
            "--export=ALL"]
    exclusive = s is None or s.exclusive
    if exclusive:
        argv.append("--exclusive")
    mem = s.mem if s is not None else None
    if mem is None and exclusive:
        mem = "0"  # all of the node's memory: the node is the run's alone anyway
    if mem is not None:
        argv.append(f"--mem={mem}")
    return [*argv, *_resource_args(job, cpus_per_gpu), str(files.batch_path)]


def _resource_args(job: JobSpec, cpus_per_gpu: int | None = None) -> list[str]:
    s = job.slurm
    out: list[str] = []
    if s is not None:
        if s.partition:
            out.append(f"--partition={s.partition}")
        if s.account:
            out.append(f"--account={s.account}")
    gpus = (s.gpus_per_node if s is not None else None) or (
        job.device.count if job.device.kind == "gpu" else None)
    if gpus:
        out.append(f"--gpus-per-node={gpus}")
    cpus = (s.cpus_per_task if s is not None else None) or (
        job.device.count if job.device.kind in ("cpu", "cpus") else None)
    if cpus is None and gpus and cpus_per_gpu:
        # One task per node drives all its GPUs: it gets their share of the cores
        # (data loading, the framework's own threads), not Slurm's default of one.
        cpus = cpus_per_gpu * gpus
    if cpus:
        out.append(f"--cpus-per-task={cpus}")
    return out


def srun_argv(job: JobSpec, run_id: int, cpus_per_gpu: int | None = None,
              node: str | None = None) -> list[str]:
    """The step's ``srun``: one task per node, its CPUs and GPUs, the container if any
    (``node``: the step runs there, a server group's run beside its server).

    Every part of the step's shape is explicit (nodes, tasks, CPUs per task, GPUs or
    none, all of the job's memory): inside an ``salloc -N1 -n2`` srun would otherwise
    read ``SLURM_NTASKS=2`` and start two runners (:data:`STEP_UNSET_VARS` go too).
    """
    s = job.slurm
    resources = _resource_args(job, cpus_per_gpu)
    # The job's CPUs and GPUs, asked by the step itself: since Slurm 22.05 srun no longer
    # inherits --cpus-per-task from the batch job, and inside an salloc there is none.
    cpus = [a for a in resources if a.startswith("--cpus-per-task")] or ["--cpus-per-task=1"]
    # A CPU job's step takes no GPU of a GPU allocation (a step gets all the job's GRES).
    gpus = [a for a in resources if a.startswith("--gpus-per-node")] or ["--gres=none"]
    srun = ["srun", *(s.srun_args if s is not None else ()),
            f"--nodes={job.nodes}", f"--ntasks={job.nodes}", "--ntasks-per-node=1",
            *cpus, *gpus, "--mem=0", "--kill-on-bad-exit=1",
            f"--job-name={job_name(run_id)}", "--export=ALL",
            *([f"--nodelist={node}"] if node else [])]
    if s is not None and s.container and s.container_runtime == "pyxis":
        # pyxis runs the whole step (node.sh: agent and runner) in the image; the run
        # folder is mounted at its own path, where node.sh and the events file are.
        srun += [f"--container-image={s.container}", "--container-mounts=@RUNDIR@"]
    return srun


def batch_script(job: JobSpec, run_id: int, files: SlurmFiles,
                 cpus_per_gpu: int | None = None, node: str | None = None) -> str:
    """``batch.sh``: the setup lines, then one ``srun`` task per node running ``node.sh``.

    The same script serves inside an existing allocation (``SLURM_JOB_ID`` set): run
    as is on this host, its ``srun`` is a step of that allocation, which the variables
    of :data:`STEP_UNSET_VARS` (unset first) cannot reshape.
    """
    srun = [a.replace("@RUNDIR@", str(files.dir))
            for a in srun_argv(job, run_id, cpus_per_gpu, node)]
    # The label is the user's text: escaped (\n shown as such), a line break in it
    # cannot start an #SBATCH directive or a command below this comment.
    lines = ["#!/bin/bash",
             f"# dltop run {run_id}: {one_line(job.describe())} (generated; see docs/cluster.md)",
             "set -e"]
    setup = job.slurm.setup if job.slurm is not None else ()
    lines += setup_lines(setup, files)
    lines += ["set +e", f"unset {' '.join(STEP_UNSET_VARS)}",
              f"exec {shlex.join(srun)} /bin/bash {shlex.quote(str(files.node_path))}"]
    return "\n".join(lines) + "\n"


def agent_lines(files: SlurmFiles, hz: float = AGENT_HZ) -> list[str]:
    """Start ``dltop agent`` on this node for the step's lifetime (docs/cluster.md).

    Its samples go to ``agent-<node>.jsonl`` in the run folder, which the engine follows
    while the job runs (:func:`dltop.jobs.executors.slurm.agent_ingestion`). The agent exits when
    ``node.sh`` kills it at the end (and on its own when its parent goes).
    """
    out = shlex.quote(str(files.dir)) + '/agent-"${SLURMD_NODENAME:-$(hostname)}".jsonl'
    return [f"{shlex.quote(sys.executable)} -m dltop agent --out {out} --hz {hz:g} "
            ">/dev/null 2>&1 &",
            "DLTOP_AGENT_PID=$!"]


def runner_command(job: JobSpec, runner_argv: Sequence[str]) -> str:
    """The shell command ``node.sh`` runs on each node (``runner_argv``: python, script, spec).

    One node: the runner exactly as the local executor starts it (TensorFlow's and CNTK's
    runners start their own workers there). More nodes (checked at load:
    :data:`dltop.catalog.MULTI_NODE_FRAMEWORKS`): PyTorch under torchrun on every
    node with a c10d rendezvous on the first; TensorFlow's runner as is, one worker per
    node, building its ``TF_CONFIG`` from :func:`tf_config_lines`' variables.
    """
    plain = shlex.join(runner_argv)
    s = job.slurm
    if s is not None and s.container and s.container_runtime == "apptainer":
        plain = shlex.join([*apptainer_argv(job, runner_argv), *runner_argv])
    nodes = catalog.capabilities(job.framework).nodes
    if job.nodes == 1 or nodes == "tf_config":
        return plain
    if nodes != "torchrun":  # the loader refuses these; a stored spec edited by hand
        raise ValueError(f"{job.framework} runs on one node (nodes = 1)")
    python, script, spec = runner_argv[0], runner_argv[1], runner_argv[2]
    argv = torchrun_argv(python, script, spec, max(job.device.workers, 1),
                         nnodes=job.nodes, rdzv_endpoint="@HEAD@:@PORT@", rdzv_id="@JOBID@",
                         log_dir=str(Path(spec).parent / "torchrun"))
    cmd = shlex.join(argv)
    return (cmd.replace("@HEAD@", '"$DLTOP_HEAD"')
            .replace("@PORT@", f"$(({TORCH_PORT_BASE} + SLURM_JOB_ID % 1000))")
            .replace("@JOBID@", '"$SLURM_JOB_ID"'))


_NODE_ADDRS_PY = """\
import subprocess, sys
def run(*argv):
    return subprocess.run(argv, stdout=subprocess.PIPE, universal_newlines=True,
                          check=True).stdout
names = run('scontrol', 'show', 'hostnames', sys.argv[1]).split()
addr = {}
try:
    nodes = run('scontrol', 'show', 'node', '-o', ','.join(names)).splitlines()
except (OSError, subprocess.CalledProcessError):  # no such node known: use the names
    nodes = []
for line in nodes:
    f = dict(x.split('=', 1) for x in line.split() if '=' in x)
    if f.get('NodeName') and f.get('NodeAddr'):
        addr[f['NodeName']] = f['NodeAddr']
print('\\n'.join(addr.get(n, n) for n in names))
"""
"""The job's nodes in Slurm's order (the order of ``SLURM_NODEID``), one address a line:
each node's ``NodeAddr`` (as Slurm itself reaches it, which a node's name need not
resolve to), its name when scontrol gives none; nothing without scontrol. Python 3.6
like the runners: the node's interpreter runs it."""

def address_lines(python: str) -> list[str]:
    """Over nodes: ``DLTOP_NODE_ADDRS`` (every node's address, :data:`_NODE_ADDRS_PY`)
    and ``DLTOP_HEAD``, the first node's (torch's c10d rendezvous runs there)."""
    return [f"DLTOP_NODE_ADDRS=$({shlex.quote(python)} -c {shlex.quote(_NODE_ADDRS_PY)} "
            '"$SLURM_JOB_NODELIST")',
            'DLTOP_HEAD=$(printf "%s\\n" "$DLTOP_NODE_ADDRS" | head -n 1)',
            "export DLTOP_NODE_ADDRS DLTOP_HEAD"]


def tf_config_lines(run_dir: Path) -> list[str]:
    """TensorFlow over nodes: this node's rank (``SLURM_NODEID``) and the folder where
    the runners exchange their ports (``DLTOP_TF_PORTS``, in the run folder on the shared
    filesystem: one per job and requeue), from which each builds its ``TF_CONFIG``
    (runners/child/tf_dist.py ``over_nodes``). Nodes sharing a host get distinct ports;
    a port derived from the job id was once another job's."""
    ports = shlex.quote(str(run_dir)) + '/tf-ports-"${SLURM_JOB_ID:-0}-${SLURM_RESTART_COUNT:-0}"'
    return [f"DLTOP_TF_PORTS={ports}",
            'DLTOP_RANK="${SLURM_NODEID:-0}"',
            "export DLTOP_TF_PORTS DLTOP_RANK"]


def relay_lines(files: SlurmFiles) -> list[str]:
    """Every node's FIFO for a torchrun worker's events, copied to the events file.

    torchrun closes inherited descriptors, so its rank 0 writes ``$DLTOP_EVENT_FIFO``
    (``runners/child/relay.py``) instead of ``$DLTOP_EVENT_FD``; c10d may place rank 0
    on any node, so each node offers a FIFO and copies what comes through it.
    """
    fifo = shlex.quote(str(files.dir)) + '/events-"${SLURM_NODEID:-0}".fifo'
    return [f"DLTOP_EVENT_FIFO={fifo}",
            'rm -f "$DLTOP_EVENT_FIFO"; mkfifo -m 600 "$DLTOP_EVENT_FIFO"',
            f'cat "$DLTOP_EVENT_FIFO" >&{EVENT_FD} &',
            "DLTOP_RELAY_PID=$!",
            "export DLTOP_EVENT_FIFO"]


def env_report_lines(files: SlurmFiles) -> list[str]:
    """The first node writes the variables of :data:`REPORTED_VARS` it has (``NAME=value``
    lines; an unset one is absent): what the runner starts with, whatever the site's
    export rules and the setup lines did to dltop's."""
    path = shlex.quote(str(files.job_env_path))
    names = " ".join(REPORTED_VARS)
    return ['if [ "${SLURM_NODEID:-0}" = 0 ]; then',
            f'    for v in {names}; do',
            '        if [ -n "${!v+x}" ]; then printf "%s=%s\\n" "$v" "${!v}"; fi',
            f"    done > {path}",
            "fi"]


def node_script(job: JobSpec, runner_argv: Sequence[str], files: SlurmFiles,
                *, agent: bool = True) -> str:
    """``node.sh``: what the step runs on each node; exits with the runner's status."""
    events = shlex.quote(str(files.events_path))
    lines = ["#!/bin/bash",
             "# one task per node: the agent in the background, the runner with its events",
             *step_check_lines(job, files),
             # before the agent: a task that ends here leaves nothing behind
             *container_check_lines(job, runner_argv, files)]
    if job.nodes > 1:
        lines += address_lines(runner_argv[0])
    if agent:
        lines += agent_lines(files)
    nodes = catalog.capabilities(job.framework).nodes if job.nodes > 1 else None
    if relayed := nodes == "torchrun":
        lines += [f"exec {EVENT_FD}>>{events}", *relay_lines(files)]
    else:
        lines += [
            # Only the first node reports events; the file is the engine's only channel.
            'if [ "${SLURM_NODEID:-0}" = 0 ]; then',
            f"    exec {EVENT_FD}>>{events}",
            "else",
            f"    exec {EVENT_FD}>/dev/null",
            "fi"]
    if nodes == "tf_config":
        lines += tf_config_lines(files.dir)
    lines += [f"export DLTOP_EVENT_FD={EVENT_FD} PYTHONUNBUFFERED=1 PYTHONIOENCODING=utf-8",
              *env_report_lines(files),
              *runner_block(job, runner_command(job, runner_argv))]
    if relayed:
        lines += [
            # The FIFO's name is gone when rank 0 opened it (relay.join): its copy ends
            # at rank 0's end; on the other nodes nobody opened it, so the copy is ended.
            'if [ -e "$DLTOP_EVENT_FIFO" ]; then kill "$DLTOP_RELAY_PID" 2>/dev/null; '
            'rm -f "$DLTOP_EVENT_FIFO"; fi',
            'wait "$DLTOP_RELAY_PID" 2>/dev/null']
    if agent:
        lines += ['kill "$DLTOP_AGENT_PID" 2>/dev/null', 'wait "$DLTOP_AGENT_PID" 2>/dev/null']
    exit_file = shlex.quote(str(files.runner_exit_path))
    lines += [f'if [ "${{SLURM_NODEID:-0}}" = 0 ]; then echo "$status" > {exit_file}; fi',
              'exit "$status"']
    return "\n".join(lines) + "\n"
