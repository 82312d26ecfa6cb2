"""A profile's ``[slurm]`` table (:class:`SlurmSettings`) and the checks that tie it to
the jobs (docs/cluster.md).

Everything here is pure: whether ``sbatch`` exists on this host is preflight's
question (:mod:`dltop.jobs.campaign`), not the loader's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles import limits, slurmopts
from dltop.profiles.device import DeviceSpec

KEYS = ("partition", "account", "time", "gpus_per_node", "cpus_per_task", "mem", "exclusive",
        "extra_args", "srun_args", "setup", "container", "container_runtime",
        "cpus_per_gpu", "parallel")
CONTAINER_RUNTIMES = ("pyxis", "apptainer")


@dataclass(frozen=True)
class SlurmSettings:
    """A profile's ``[slurm]`` table: how a job becomes a Slurm job (docs/cluster.md).

    None means "Slurm's default" (the cluster's or the partition's).
    """

    partition: str | None = None
    account: str | None = None
    time: str | None = None
    """Slurm's time limit (``MM``, ``HH:MM:SS``, ``D-HH:MM``...); None: from ``timeout_s``."""
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    extra_args: tuple[str, ...] = ()
    """More ``sbatch`` options, one argument each (e.g. ``--qos=short``)."""
    setup: tuple[str, ...] = ()
    """Shell lines run on each node before the job (e.g. ``module load cuda``)."""
    mem: str | None = None
    """``--mem`` (``64G``, ``0`` = all of the node's); None: ``0`` when exclusive, else
    Slurm's default."""
    exclusive: bool = True
    """``--exclusive``: a timed run has its nodes to itself (False: shared, recorded so)."""
    srun_args: tuple[str, ...] = ()
    """More ``srun`` options for the job's step (e.g. ``--cpu-bind=cores``)."""
    container: str | None = None
    """The image the runner runs in (None: none)."""
    container_runtime: str = "pyxis"
    """``pyxis`` (``srun --container-image``) or ``apptainer`` (``apptainer exec``)."""
    cpus_per_gpu: int | None = None
    """A GPU job's ``--cpus-per-task`` per GPU when ``cpus_per_task`` is not given (None:
    the nodes' cores per GPU from ``sinfo``)."""
    parallel: int = 1
    """Runs of the campaign in Slurm at once (separate jobs; docs/cluster.md)."""
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    """Keys whose value came from elsewhere than the profile, with where: ``("time",
    "config.toml: systems.NAME")``. For messages only; not stored."""

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON (lists for the tuples)."""
        return {"partition": self.partition, "account": self.account, "time": self.time,
                "gpus_per_node": self.gpus_per_node, "cpus_per_task": self.cpus_per_task,
                "extra_args": list(self.extra_args), "setup": list(self.setup),
                "mem": self.mem, "exclusive": self.exclusive,
                "srun_args": list(self.srun_args), "container": self.container,
                "container_runtime": self.container_runtime,
                "cpus_per_gpu": self.cpus_per_gpu, "parallel": self.parallel}

    @classmethod
    def from_json_dict(cls, d: Mapping[str, Any]) -> SlurmSettings:
        """Inverse of :meth:`to_json_dict` (a missing key takes its default)."""
        return cls(partition=d.get("partition"), account=d.get("account"), time=d.get("time"),
                   gpus_per_node=d.get("gpus_per_node"), cpus_per_task=d.get("cpus_per_task"),
                   extra_args=tuple(d.get("extra_args") or ()), setup=tuple(d.get("setup") or ()),
                   mem=d.get("mem"), exclusive=d.get("exclusive", True),
                   srun_args=tuple(d.get("srun_args") or ()), container=d.get("container"),
                   container_runtime=d.get("container_runtime") or "pyxis",
                   cpus_per_gpu=d.get("cpus_per_gpu"), parallel=int(d.get("parallel") or 1))


_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}"
                   r"|\d+-\d+:\d{1,2}:\d{1,2})$")
"""Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""

_SHAPE = {
    # the job's nodes, tasks, CPUs, GPUs and memory: each has its own key, which dltop
    # records and checks against the job
    "nodes": "nodes", "ntasks": "nodes", "ntasks-per-node": "nodes",
    "ntasks-per-socket": "nodes", "ntasks-per-core": "nodes", "ntasks-per-gpu": "nodes",
    "ntasks-per-tres": "nodes",
    "time": "slurm.time", "time-min": "slurm.time",
    "gpus": "slurm.gpus_per_node", "gpus-per-node": "slurm.gpus_per_node",
    "gpus-per-task": "slurm.gpus_per_node", "gpus-per-socket": "slurm.gpus_per_node",
    "gres": "slurm.gpus_per_node",
    "cpus-per-task": "slurm.cpus_per_task", "cpus-per-gpu": "slurm.cpus_per_task",
    "mincpus": "slurm.cpus_per_task",
    "mem": "slurm.mem", "mem-per-cpu": "slurm.mem", "mem-per-gpu": "slurm.mem",
    "exclusive": "slurm.exclusive", "oversubscribe": "slurm.exclusive",
    "partition": "slurm.partition", "account": "slurm.account",
    "container": "slurm.container", "container-image": "slurm.container",
}
_REFUSED = {
    **dict.fromkeys((
        "overcommit", "sockets-per-node", "cores-per-socket", "threads-per-core",
        "extra-node-info", "core-spec", "thread-spec", "hint", "distribution", "contiguous",
        "spread-job", "use-min-nodes", "exact", "whole", "overlap", "tmp", "het-group",
        "network", "gres-flags"), "the job's shape"),
    **dict.fromkeys(("nodelist", "nodefile", "exclude", "clusters", "cluster", "switches",
                     "jobid", "no-allocate", "relative"), "where the job runs"),
    **dict.fromkeys(("output", "error", "input", "chdir", "open-mode", "container-mounts",
                     "container-workdir", "container-save", "container-name"),
                    "the job's files or folder"),
    **dict.fromkeys(("array", "requeue", "no-requeue", "dependency", "kill-on-invalid-dep",
                     "deadline", "signal", "hold", "immediate", "no-kill", "kill-on-bad-exit",
                     "wait", "wait-all-nodes", "test-only", "reboot", "delay-boot"),
                    "the job's lifetime"),
    **dict.fromkeys(("export", "export-file", "get-user-env", "preserve-env", "job-name",
                     "parsable", "wrap", "batch", "uid", "gid", "prolog", "epilog",
                     "task-prolog", "task-epilog", "multi-prog", "pty", "interactive",
                     "help", "usage", "version"), "what the job runs"),
}
ALLOWED: dict[str, frozenset[str]] = {
    "sbatch": frozenset((
        "qos", "constraint", "cluster-constraint", "prefer", "reservation", "comment",
        "mail-type", "mail-user", "begin", "licenses", "wckey", "nice", "verbose",
        "quiet")),
    "srun": frozenset((
        "comment", "cpu-bind", "mem-bind", "gpu-bind", "accel-bind", "label", "unbuffered",
        "verbose", "quiet", "container-writable", "container-readonly",
        "container-remap-root", "no-container-remap-root", "container-mount-home",
        "no-container-mount-home", "container-entrypoint", "no-container-entrypoint",
        "container-entrypoint-log", "container-env")),
}
"""What ``extra_args`` (sbatch) and ``srun_args`` may hold: options that change neither
the job's shape, placement, files nor lifetime (docs/cluster.md)."""
OPTION_KEYS = {"extra_args": "sbatch", "srun_args": "srun"}


def check_args(args: tuple[str, ...], command: str) -> str | None:
    """Why ``args`` cannot be passed to ``command`` (``sbatch``/``srun``), or None.

    Read as Slurm reads them (:mod:`dltop.profiles.slurmopts`: prefixes, bundles, values
    as the next argument); only the :data:`ALLOWED` options pass.
    """
    try:
        parsed = slurmopts.parse(args, command)
    except slurmopts.OptionError as exc:
        return str(exc)
    for p in parsed:
        name = p.option.canonical
        said = f"{p.arg!r}: " + (f"{p.written} is {p.name}: " if p.written != p.name else "")
        if name in ALLOWED[command]:
            if p.missing:
                return f"{said}{p.name} needs a value"
            continue
        if name in _SHAPE:
            return f"{said}dltop sets {p.name} itself (use the key {_SHAPE[name]} instead)"
        if name in _REFUSED:
            return f"{said}{p.name} would change {_REFUSED[name]}, which dltop controls"
        return (f"{said}{p.name} is not one dltop passes to {command} (allowed: "
                f"{', '.join('--' + a for a in sorted(ALLOWED[command]))})")
    return None


def time_seconds(limit: str) -> int:
    """A Slurm time limit (already matched by ``_TIME``) in seconds."""
    days, _, rest = limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        parts += [0] * (3 - len(parts))
        return int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    if len(parts) == 1:
        return parts[0] * 60  # M
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]  # M:S
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


_MEM = re.compile(r"^\d+[KMGT]?$")
_MOST = {"gpus_per_node": limits.MAX_GPUS, "cpus_per_task": limits.MAX_CPUS,
         "cpus_per_gpu": limits.MAX_CPUS, "parallel": limits.MAX_PARALLEL}
"""The integer keys' bounds (docs/profiles.md#value-ranges)."""


Err = Callable[[str, str], UserError]


def parse(err: Err, table: Any,
          sources: Mapping[str, str] | None = None) -> SlurmSettings | None:
    """The ``[slurm]`` table as :class:`SlurmSettings` (None when the profile has none).

    ``sources``: the keys of ``table`` that came from elsewhere (a system's table), with
    where, so that a later check of their values names that file and table.

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
        most = _MOST[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                              or not 1 <= v <= most):
            raise err(f"slurm.{key}", f"expected an integer >= 1 and <= {most}, got {v!r}")
        return v

    def strings(key: str) -> tuple[str, ...]:
        v = table.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise err(f"slurm.{key}", f"expected a list of non-empty strings, got {v!r}")
        return tuple(v)

    def slurm_value(key: str, form: re.Pattern[str], least: int, expected: str) -> str | None:
        # A bare number is one Slurm reads too (minutes, megabytes): kept as its text.
        v = table.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= least:
            v = str(v)
        if v is not None and (not isinstance(v, str) or not form.match(v)):
            raise err(f"slurm.{key}", f"expected {expected}, got {v!r}")
        return v

    time = slurm_value("time", _TIME, 1,
                       'a Slurm time limit (minutes, "HH:MM:SS" or "D-HH:MM:SS")')
    extra, srun = strings("extra_args"), strings("srun_args")
    for key, args in (("extra_args", extra), ("srun_args", srun)):
        why = check_args(args, OPTION_KEYS[key])
        if why is not None:
            raise err(f"slurm.{key}", why)
    mem = slurm_value("mem", _MEM, 0, 'Slurm memory per node ("64G", "512M", 0 for all of it)')
    exclusive = table.get("exclusive", True)
    if not isinstance(exclusive, bool):
        raise err("slurm.exclusive", f"expected true or false, got {exclusive!r}")
    runtime = table.get("container_runtime", "pyxis")
    if runtime not in CONTAINER_RUNTIMES:
        raise err("slurm.container_runtime", f"expected one of {', '.join(CONTAINER_RUNTIMES)}"
                  f", got {runtime!r}")
    if "container_runtime" in table and "container" not in table:
        raise err("slurm.container_runtime", "needs slurm.container (the image)")
    return SlurmSettings(partition=text("partition"), account=text("account"), time=time,
                         gpus_per_node=count("gpus_per_node"),
                         cpus_per_gpu=count("cpus_per_gpu"), parallel=count("parallel") or 1,
                         cpus_per_task=count("cpus_per_task"), extra_args=extra,
                         setup=strings("setup"), mem=mem, exclusive=exclusive, srun_args=srun,
                         container=text("container"), container_runtime=runtime,
                         sources=tuple(sorted((sources or {}).items())))


def _key_err(err: Err, slurm: SlurmSettings, key: str, msg: str) -> UserError:
    """The error about ``key`` of the ``[slurm]`` table, naming where its value is written."""
    source = dict(slurm.sources).get(key)
    return UserError(f"{source}.{key}: {msg}") if source else err(f"slurm.{key}", msg)


def check_job(err: Err, loc: Callable[[str], str], framework: str, device: DeviceSpec,
              nodes: int, executor: str, slurm: SlurmSettings | None,
              timeout_s: float | None = None) -> None:
    """Checks of one job's ``nodes``/``executor`` against its device and the ``[slurm]`` table.

    Raises:
        UserError: ``nodes > 1`` on the local executor or with a command job; a device
            larger than ``gpus_per_node``/``cpus_per_task`` allow; a ``time`` shorter
            than the job's ``timeout_s``.
    """
    if nodes > 1 and executor != "slurm":
        raise err(loc("nodes"), f"nodes = {nodes} needs executor = \"slurm\" (the local "
                  "executor runs on this host alone: nodes = 1)")
    can = catalog.capabilities(framework)
    if nodes > 1 and can.program:
        raise err(loc("nodes"), f'nodes > 1 does not apply to frameworks = ["{framework}"] (the '
                  "program decides how it spans hosts; run it with nodes = 1)")
    if nodes > 1 and not can.nodes:
        raise err(loc("nodes"), f"nodes > 1 runs {' and '.join(catalog.MULTI_NODE_FRAMEWORKS)} "
                  f"jobs; {framework} runs on one node (nodes = 1{can.one_node_why})")
    if nodes > 1 and not can.nodes_on_cpus and device.kind == "cpus":
        raise err(loc("nodes"), f"TensorFlow with {device.label} runs on one node (nodes = 1): "
                  f"P one-thread workers on each of {nodes} nodes is not built; over nodes "
                  "use cpu:N (one N-thread worker per node) or gpu:N")
    if executor != "slurm" or slurm is None:
        return
    if slurm.time is not None and timeout_s is not None \
            and time_seconds(slurm.time) < timeout_s:
        # Slurm would kill the job before dltop's own deadline: a TIMEOUT from the
        # cluster where the profile asked for more.
        raise _key_err(err, slurm, "time",
                       f"{slurm.time!r} ({time_seconds(slurm.time)} s) is shorter than the "
                       f"job's timeout_s = {timeout_s:g}; raise it or leave it out (dltop "
                       "then asks for timeout_s plus a margin)")
    if device.kind == "gpu" and slurm.gpus_per_node is not None \
            and slurm.gpus_per_node < device.count:
        raise _key_err(err, slurm, "gpus_per_node", f"{slurm.gpus_per_node} is fewer than "
                       f"the {device.label} a job asks for on each node")
    if device.kind in ("cpu", "cpus") and slurm.cpus_per_task is not None \
            and slurm.cpus_per_task < device.count:
        raise _key_err(err, slurm, "cpus_per_task", f"{slurm.cpus_per_task} is fewer than "
                       f"the {device.label} a job asks for on each node")
