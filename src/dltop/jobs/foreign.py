"""Runner processes of other dltop engines that share a run's devices.

The device lease (:mod:`dltop.jobs.lease`) keeps engines of this dltop apart;
an engine of an older dltop takes no lease, and a lease cannot always be taken
(read-only ``/tmp``). A run whose devices were used by another engine's runner
anyway is recorded with ``concurrent_runs > 0``, so every export marks it (``shared``
in a campaign without ``--pack``; docs/metrics.md).

A dltop runner is recognised by its argv (``<python> .../runners/child/<x>_runner.py
spec.json``), which every dltop version uses; runners of this engine (its
children, and their ranks at any depth) are not foreign.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence

import psutil

_MARK = f"{os.sep}runners{os.sep}child{os.sep}"


def is_runner_argv(argv: Sequence[str]) -> bool:
    """True if ``argv`` starts a dltop runner script."""
    return any(_MARK in a and a.endswith("_runner.py") for a in argv[1:3])


def _visible_gpus(proc: psutil.Process) -> set[int] | None:
    """The GPUs a process was given (``CUDA_VISIBLE_DEVICES``), None when unknown."""
    try:
        value = proc.environ().get("CUDA_VISIBLE_DEVICES")
    except psutil.Error:
        return None
    if value is None:
        return None
    return {int(x) for x in value.split(",") if x.strip().isdigit()}


def sharing_runners(cpus: Sequence[int] | None, gpus: Sequence[int]) -> list[int]:
    """Pids of other engines' runners now on these devices.

    Args:
        cpus: the run's pinned CPUs; None when it is not pinned (it floats over
            the whole host, so every other runner shares its CPUs).
        gpus: the run's GPUs (empty for a CPU run).
    """
    me = os.getpid()
    # This engine's own processes at any depth: a data-parallel runner's ranks are
    # grandchildren (torchrun's agent, TensorFlow's worker 0, mpiexec start them).
    try:
        mine = {p.pid for p in psutil.Process(me).children(recursive=True)}
    except psutil.Error:
        mine = set()
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        info = proc.info
        if info["pid"] == me or info["pid"] in mine or info["ppid"] in mine | {me} \
                or not is_runner_argv(info["cmdline"] or ()):
            continue
        if gpus:
            theirs = _visible_gpus(proc)
            if theirs is not None and theirs & set(gpus):
                found.append(int(info["pid"]))
            continue
        try:
            affinity = set(proc.cpu_affinity() or ())
        except (psutil.Error, AttributeError):
            continue
        if cpus is None or affinity & set(cpus):
            found.append(int(info["pid"]))
    return found


FOREIGN_POLL_S = 2.0
"""How often a run's devices are scanned for other engines' runners."""


async def most_sharing(cpus: Sequence[int] | None, gpus: Sequence[int],
                       done: asyncio.Event, poll_s: float = FOREIGN_POLL_S) -> int:
    """Scan until ``done`` is set; return the most foreign runners seen at once."""
    most = 0
    while True:
        most = max(most, len(await asyncio.to_thread(sharing_runners, cpus, gpus)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=poll_s)
        if done.is_set():
            return most
