"""Facts about the host and the child's environment, recorded with every run."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from dltop.profiles.jobspec import JobSpec
from dltop.results.caption import ALLOC_ENV_KEY
from dltop.results.gpufacts import GPU_FACTS_KEY
from dltop.telemetry import nvml
from dltop.telemetry.host import host_facts
from dltop.telemetry.values import GpuRunFacts, GpuStatic

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "TF_NUM_INTRAOP_THREADS",
               "TF_NUM_INTEROP_THREADS")
ALLOC_VARS = ("LD_PRELOAD", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_",
              "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_",
              "MALLOC_CONF", "TCMALLOC_RELEASE_RATE")
"""Variables that choose or tune the runner's memory allocator (glibc's malloc, or a
preloaded jemalloc/tcmalloc). A CPU step's time depends on them (glibc's default mmap
threshold alone moved an alexnet-r step by ~17 %, docs/frameworks.md), so a run that
had any keeps them in ``environment.extra`` under ``ALLOC_ENV_KEY`` (the caption names
them)."""


@functools.cache
def core_order() -> tuple[int, ...]:
    """Logical CPUs this process may use, one per physical core first, then SMT siblings.

    A ``cpu:N`` run is pinned to N of them in this order (see
    :mod:`dltop.jobs.allocator`), so N <= physical cores never shares a core
    between two of its threads.
    """
    allowed = sorted(os.sched_getaffinity(0))
    rank: dict[int, tuple[int, int]] = {}
    seen: dict[str, int] = {}
    for cpu in allowed:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(base + "core_id") as a, open(base + "physical_package_id") as b:
                core = f"{b.read().strip()}:{a.read().strip()}"
        except OSError:
            core = f"cpu{cpu}"
        rank[cpu] = (seen.get(core, 0), cpu)
        seen[core] = seen.get(core, 0) + 1
    return tuple(sorted(allowed, key=lambda c: rank[c]))


def child_env(job: JobSpec, base: Mapping[str, str], extra: Mapping[str, str],
              gpu_indices: tuple[int, ...]) -> dict[str, str]:
    """The runner child's environment: thread variables and visible devices set."""
    env = dict(base)
    env.update(extra)
    if job.device.kind in ("cpu", "cpus"):
        # cpus:P workers run one thread each; cpu:N is one process with N threads.
        n = str(job.device.count if job.device.kind == "cpu" else 1)
        for var in THREAD_VARS:
            env[var] = n
        # Keep frameworks from grabbing a GPU for a CPU measurement.
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
    return env


def driver_version(gpus: Sequence[GpuStatic]) -> str | None:
    """The GPU driver version of a run's GPUs (``550.54.15``); simulated GPUs' fake one
    is labelled ``(simulated)``; None without GPUs or when NVML could not say."""
    versions = list(dict.fromkeys(
        f"{g.driver_version} (simulated)" if g.simulated else g.driver_version
        for g in gpus if g.driver_version))
    return ", ".join(versions) or None


def gpu_facts(gpu_indices: Sequence[int]) -> tuple[GpuRunFacts, ...]:
    """Clocks, persistence, power limit, ECC and PCIe link of a run's GPUs, read as it
    starts (empty for a CPU job, or where NVML is unavailable). Blocking: NVML calls."""
    found = (nvml.gpu_run_facts(i) for i in gpu_indices)
    return tuple(f for f in found if f is not None)


def environment_row(hello: Mapping[str, Any], env: Mapping[str, str],
                    job: JobSpec, gpus: Sequence[GpuStatic] = (),
                    facts: Sequence[GpuRunFacts] = ()) -> dict[str, Any]:
    """One ``environment`` row: host facts plus what the runner said in ``hello``.

    Args:
        hello: the runner's hello event (with its ``setup`` event's fields).
        env: the environment the runner was started with.
        job: the run's job.
        gpus: static facts of the run's GPUs from the telemetry backend (the driver
            version comes from there: NVML has one owner, :mod:`dltop.telemetry.nvml`).
        facts: the run's GPUs at start (:func:`gpu_facts`), kept in ``extra`` under
            :data:`GPU_FACTS_KEY`, one object per GPU with its fields' names.
    """
    # The facts are dltop's own reading, never the child's: a hello cannot forge them.
    extra = {k: v for k, v in hello.items() if k not in _HELLO_COLUMNS and k != GPU_FACTS_KEY}
    if facts:
        extra[GPU_FACTS_KEY] = [dataclasses.asdict(f) for f in facts]
    alloc = {k: env[k] for k in ALLOC_VARS if env.get(k)}
    if alloc:
        extra[ALLOC_ENV_KEY] = alloc
    return {
        **host_facts(),
        "python_version": hello.get("python_version"),
        "python_executable": hello.get("python_executable"),
        "framework": job.framework,
        "framework_version": hello.get("framework_version"),
        "blas": hello.get("blas"),
        "threads": hello.get("threads"),
        "thread_env": json.dumps({k: env[k] for k in THREAD_VARS if k in env}),
        "cuda_version": hello.get("cuda_version"),
        "cudnn_version": hello.get("cudnn_version"),
        "device_name": hello.get("device_name"),
        "driver_version": driver_version(gpus),
        "extra": json.dumps(extra, default=str),
    }


_HELLO_COLUMNS = frozenset({
    "v", "event", "framework", "framework_version", "python_version", "python_executable",
    "device", "threads", "pid", "blas", "cuda_version", "cudnn_version", "device_name"})
"""Hello fields with a column of their own (the rest go to ``extra``)."""
