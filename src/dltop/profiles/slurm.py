"""A profile's ``[slurm]`` table and the checks that tie it to the jobs (docs/cluster.md).

Everything here is pure: whether ``sbatch`` exists on this host is preflight's
question (:mod:`dltop.jobs.campaign`), not the loader's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dltop.errors import UserError
from dltop.profiles.model import DeviceSpec, SlurmSettings

KEYS = ("partition", "account", "time", "gpus_per_node", "cpus_per_task", "extra_args", "setup")

_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}"
                   r"|\d+-\d+:\d{1,2}:\d{1,2})$")
"""Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""

RESERVED_ARGS = ("--nodes", "-N", "--wait", "-W", "--job-name", "-J", "--output", "-o",
                 "--error", "-e", "--parsable", "--wrap", "--ntasks-per-node", "--chdir", "-D")
"""sbatch options dltop sets itself: in ``extra_args`` they would contradict the job."""

MULTI_NODE_FRAMEWORKS = ("torch", "tensorflow")
"""Frameworks whose runner spans nodes: PyTorch under torchrun, TensorFlow as one
MultiWorkerMirroredStrategy worker per node (``cpu:N``/``gpu:N``; its ``cpus:P`` workers
start on one host, launched by its runner). CNTK's runner starts ``mpiexec`` itself on
one host: it keeps nodes = 1."""

Err = Callable[[str, str], UserError]


def parse(err: Err, table: Any) -> SlurmSettings | None:
    """The ``[slurm]`` table as :class:`SlurmSettings` (None when the profile has none).

    Raises:
        UserError: via ``err(key, message)``: an unknown key or a value of the wrong kind.
    """
    if table is None:
        return None
    if not isinstance(table, dict):
        raise err("slurm", "expected a table [slurm]")
    for key in table:
        if key not in KEYS:
            raise err(f"slurm.{key}", f"unknown key (valid here: {', '.join(KEYS)})")

    def text(key: str) -> str | None:
        v = table.get(key)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise err(f"slurm.{key}", f"expected a non-empty string, got {v!r}")
        return v

    def count(key: str) -> int | None:
        v = table.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise err(f"slurm.{key}", f"expected an integer >= 1, got {v!r}")
        return v

    def strings(key: str) -> tuple[str, ...]:
        v = table.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise err(f"slurm.{key}", f"expected a list of non-empty strings, got {v!r}")
        return tuple(v)

    time = table.get("time")
    if isinstance(time, int) and not isinstance(time, bool) and time >= 1:
        time = str(time)  # minutes, as Slurm reads a bare number
    if time is not None and (not isinstance(time, str) or not _TIME.match(time)):
        raise err("slurm.time", f"expected a Slurm time limit (minutes, \"HH:MM:SS\" or "
                  f"\"D-HH:MM:SS\"), got {time!r}")
    extra = strings("extra_args")
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name in RESERVED_ARGS:
            raise err("slurm.extra_args", f"{arg!r}: dltop sets {name} itself (nodes come from "
                      "the profile's nodes key; output and waiting from the executor)")
    return SlurmSettings(partition=text("partition"), account=text("account"), time=time,
                         gpus_per_node=count("gpus_per_node"),
                         cpus_per_task=count("cpus_per_task"), extra_args=extra,
                         setup=strings("setup"))


def check_job(err: Err, loc: Callable[[str], str], framework: str, device: DeviceSpec,
              nodes: int, executor: str, slurm: SlurmSettings | None) -> None:
    """Checks of one job's ``nodes``/``executor`` against its device and the ``[slurm]`` table.

    Raises:
        UserError: ``nodes > 1`` on the local executor or with a command job; a device
            larger than ``gpus_per_node``/``cpus_per_task`` allow.
    """
    if nodes > 1 and executor != "slurm":
        raise err(loc("nodes"), f"nodes = {nodes} needs executor = \"slurm\" (the local "
                  "executor runs on this host alone: nodes = 1)")
    if nodes > 1 and framework == "command":
        raise err(loc("nodes"), 'nodes > 1 does not apply to frameworks = ["command"] (the '
                  "program decides how it spans hosts; run it with nodes = 1)")
    if nodes > 1 and framework not in MULTI_NODE_FRAMEWORKS:
        why = ": its runner starts mpiexec on one host" if framework == "cntk" else ""
        raise err(loc("nodes"), f"nodes > 1 runs {' and '.join(MULTI_NODE_FRAMEWORKS)} jobs; "
                  f"{framework} runs on one node (nodes = 1{why})")
    if nodes > 1 and framework == "tensorflow" and device.kind == "cpus":
        raise err(loc("nodes"), f"TensorFlow with {device.label} runs on one node (nodes = 1): "
                  f"P one-thread workers on each of {nodes} nodes is not built; over nodes "
                  "use cpu:N (one N-thread worker per node) or gpu:N")
    if executor != "slurm" or slurm is None:
        return
    if device.kind == "gpu" and slurm.gpus_per_node is not None \
            and slurm.gpus_per_node < device.count:
        raise err("slurm.gpus_per_node", f"{slurm.gpus_per_node} is fewer than the "
                  f"{device.label} a job asks for on each node")
    if device.kind in ("cpu", "cpus") and slurm.cpus_per_task is not None \
            and slurm.cpus_per_task < device.count:
        raise err("slurm.cpus_per_task", f"{slurm.cpus_per_task} is fewer than the "
                  f"{device.label} a job asks for on each node")
