"""What a Slurm job asks of one node against what its partition's nodes have (preflight).

A ``cpu:8`` job in a partition of 4-CPU nodes, or ``gpu:8`` where nodes hold 4 GPUs,
would wait in Slurm's queue for ever (or be refused by sbatch only once its turn
comes): preflight asks ``sinfo`` once for every partition's nodes and treats such a
job as it treats a local ``gpu:N`` beyond this host's GPUs (exit 2, or
``unsatisfiable`` with ``--skip-unavailable``), naming the file, the key and the
partition's figure. When ``sinfo`` cannot answer (no controller reachable, no such
partition) nothing is decided here: sbatch says what is wrong at the run.

Light on purpose, as :mod:`dltop.jobs.executors.where`: preflight imports it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from dltop.profiles.jobspec import JobSpec

SINFO_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class NodeFigures:
    """One node of a partition: its CPUs and GPUs."""

    cpus: int
    gpus: int


@dataclass(frozen=True)
class Partitions:
    """Every partition's nodes, as ``sinfo -h -N -o "%P|%c|%G"`` lists them."""

    nodes: Mapping[str, tuple[NodeFigures, ...]]
    default: str | None
    """The partition a job without ``slurm.partition`` goes to (sinfo's ``*``)."""


def gres_gpus(gres: str) -> int:
    """GPUs of a node's generic resources (``gpu:4``, ``gpu:a100:4(S:0-1)``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        fields = item.split("(", 1)[0].split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def parse_partitions(sinfo: str) -> Partitions:
    """``sinfo -h -N -o "%P|%c|%G"`` (a line per node and partition) as :class:`Partitions`."""
    nodes: dict[str, list[NodeFigures]] = {}
    default = None
    for line in sinfo.splitlines():
        part, _, rest = line.strip().partition("|")
        cpus, _, gres = rest.partition("|")
        if not part or not cpus.isdigit():
            continue
        if part.endswith("*"):
            part = default = part[:-1]
        nodes.setdefault(part, []).append(NodeFigures(int(cpus), gres_gpus(gres)))
    return Partitions({k: tuple(v) for k, v in nodes.items()}, default)


def query_partitions(env: Mapping[str, str]) -> Partitions | None:
    """Every partition's nodes from ``sinfo``; None when it cannot answer."""
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%P|%c|%G"], env=dict(env),
                              capture_output=True, text=True, timeout=SINFO_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_partitions(done.stdout) if done.returncode == 0 else None


def _where(job: JobSpec, key: str, value: object, source: str) -> str:
    """``file: slurm.key = value``, or ``config.toml: systems.NAME.key = value`` when a
    system set it."""
    s = job.slurm
    system = dict(s.sources).get(key) if s is not None else None
    return f"{system}.{key} = {value}" if system else f"{source}: slurm.{key} = {value}"


def needs(job: JobSpec, source: str) -> tuple[tuple[int, str] | None, tuple[int, str] | None]:
    """What one node must have for ``job``: (CPUs, where that is set), (GPUs, where),
    as the job's sbatch asks them (:func:`dltop.jobs.executors.slurm_script.sbatch_argv`);
    None for what it does not ask (Slurm's default of one CPU)."""
    s, dev = job.slurm, job.device
    gpus: tuple[int, str] | None = None
    if s is not None and s.gpus_per_node:
        gpus = (s.gpus_per_node, _where(job, "gpus_per_node", s.gpus_per_node, source))
    elif dev.kind == "gpu":
        gpus = (dev.count, f"{source}: devices: {dev.label}")
    cpus: tuple[int, str] | None = None
    if s is not None and s.cpus_per_task:
        cpus = (s.cpus_per_task, _where(job, "cpus_per_task", s.cpus_per_task, source))
    elif dev.kind in ("cpu", "cpus"):
        cpus = (dev.count, f"{source}: devices: {dev.label}")
    elif gpus is not None and s is not None and s.cpus_per_gpu:
        cpus = (s.cpus_per_gpu * gpus[0],
                f"{_where(job, 'cpus_per_gpu', s.cpus_per_gpu, source)} (x {gpus[0]} GPUs)")
    return cpus, gpus


def partition_problem(job: JobSpec, partitions: Partitions, source: str) -> str | None:
    """Why no ``job.nodes`` nodes of the job's partition can hold one of its tasks, or None
    (also when the partition is not one sinfo listed: sbatch says so)."""
    s = job.slurm
    name = (s.partition if s is not None else None) or partitions.default
    nodes = partitions.nodes.get(name or "")
    if not nodes:
        return None
    cpus, gpus = needs(job, source)
    want_cpus, want_gpus = (cpus[0] if cpus else 1), (gpus[0] if gpus else 0)
    most_cpus, most_gpus = max(n.cpus for n in nodes), max(n.gpus for n in nodes)
    if cpus is not None and most_cpus < want_cpus:
        return (f"{cpus[1]} needs {want_cpus} CPUs on one node; partition {name}'s nodes "
                f"have at most {most_cpus} (sinfo)")
    if gpus is not None and most_gpus < want_gpus:
        return (f"{gpus[1]} needs {want_gpus} GPUs on one node; partition {name}'s nodes "
                f"have at most {most_gpus} (sinfo)")
    fit = sum(1 for n in nodes if n.cpus >= want_cpus and n.gpus >= want_gpus)
    if fit < job.nodes:
        return (f"{source}: nodes = {job.nodes} needs {job.nodes} nodes of {want_cpus} CPUs "
                f"and {want_gpus} GPUs; partition {name} has {fit} such "
                f"node{'s' if fit != 1 else ''} (sinfo)")
    return None
