"""Host telemetry through psutil: per-core CPU, load, memory, and a run's process tree.

Units: percentages 0-100 per core (a process's ``cpu_pct`` may exceed 100 on
several cores); bytes for memory. ``Process.cpu_percent`` answers 0.0 the first
time it is asked, so each process object is kept across samples and primed
when first seen. The host's user/system/iowait split is the share of all CPUs'
time between two readings (:func:`cpu_split_pct`), from counters this sampler
keeps, primed when it is made.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import time
from typing import Any

import psutil

from dltop.telemetry.values import HostSample, TreeSample

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")
"""Busy time of a CPU; guest time is already inside user and nice on Linux."""
_GUEST_FIELDS = ("guest", "guest_nice")
"""Counted inside user and nice on Linux: left out of the total, as psutil does."""


def cpu_split_pct(prev: Any, now: Any) -> tuple[float, float, float | None] | None:
    """Host (user, system, iowait) in % of all CPUs' time between two ``psutil.cpu_times()``.

    User includes nice; system includes irq and softirq; iowait is None where
    the platform has no such field (Linux only). None when no time passed.
    """
    def delta(name: str) -> float:
        return max(0.0, getattr(now, name, 0.0) - getattr(prev, name, 0.0))

    fields = [f for f in now._fields if f not in _GUEST_FIELDS]
    total = sum(delta(f) for f in fields)
    if total <= 0:
        return None
    iowait = 100.0 * delta("iowait") / total if "iowait" in now._fields else None
    return (100.0 * (delta("user") + delta("nice")) / total,
            100.0 * (delta("system") + delta("irq") + delta("softirq")) / total, iowait)


def cpu_busy_s() -> tuple[float, ...]:
    """Cumulative busy seconds of each logical CPU (index = CPU number)."""
    return tuple(sum(getattr(t, f, 0.0) for f in _BUSY_FIELDS)
                 for t in psutil.cpu_times(percpu=True))


def _cpu_s(p: psutil.Process, children: bool) -> float:
    t = p.cpu_times()
    return t.user + t.system + ((t.children_user + t.children_system) if children else 0.0)


def process_name(pid: int) -> str:
    """A process's name, or ``?`` when it is gone or hidden."""
    try:
        return psutil.Process(pid).name()
    except _GONE:
        return "?"


def meminfo_bytes(path: str = "/proc/meminfo") -> tuple[int, int, int] | None:
    """(memory used, memory total, swap used) in bytes from Linux's ``/proc/meminfo``,
    as psutil counts them (used = total - available; swap used = total - free); None
    where the file or one of its fields is missing (psutil then answers)."""
    fields: dict[str, int] = {}
    try:
        with open(path, "rb") as fh:
            for line in fh:
                key, _, rest = line.partition(b":")
                if key in (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree"):
                    fields[key.decode()] = int(rest.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) < 4:
        return None
    return (fields["MemTotal"] - fields["MemAvailable"], fields["MemTotal"],
            fields["SwapTotal"] - fields["SwapFree"])


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (or ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@functools.cache
def host_facts() -> dict[str, Any]:
    """Host-wide facts: name, OS, CPU model, physical and logical core counts."""
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
    }


class HostSampler:
    """Stateful host reader (one per sampler thread)."""

    def __init__(self) -> None:
        psutil.cpu_percent(percpu=True)  # prime: the next call measures since now
        # Our own previous totals, not psutil.cpu_times_percent's module-wide ones, which
        # every other caller in the process (the live view's sampler) would reset.
        self._cpu_times = psutil.cpu_times()
        self._procs: dict[int, psutil.Process] = {}
        self._self = psutil.Process()
        self._seen_cpu_s: dict[int, float] = {}  # pid -> CPU seconds at the last scan

    def glance(self) -> HostSample:
        """What the live view draws: per-core CPU, memory, swap and load; none of the
        cumulative counters or the user/system split that stored windows need.

        About a fifth of :meth:`sample`'s CPU (one read of ``/proc/meminfo`` gives
        memory and swap on Linux): it runs at every frame of ``dltop tui``.
        """
        try:
            load: float | None = os.getloadavg()[0]
        except OSError:
            load = None
        mem = meminfo_bytes()
        if mem is None:
            vm = psutil.virtual_memory()
            mem = (int(vm.total - vm.available), int(vm.total), int(psutil.swap_memory().used))
        return HostSample(t_mono_ns=time.monotonic_ns(),
                          cpu_pct_per_core=tuple(psutil.cpu_percent(percpu=True)),
                          load_1m=load, mem_used_bytes=mem[0], mem_total_bytes=mem[1],
                          swap_used_bytes=mem[2])

    def sample(self) -> HostSample:
        """Read the host (process trees come from :meth:`trees`, one per run)."""
        vm = psutil.virtual_memory()
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = None
        times = psutil.cpu_times()
        split = cpu_split_pct(self._cpu_times, times)
        self._cpu_times = times
        user, system, iowait = split if split is not None else (None, None, None)
        return HostSample(
            t_mono_ns=time.monotonic_ns(),
            cpu_pct_per_core=tuple(psutil.cpu_percent(percpu=True)),
            load_1m=load, mem_used_bytes=int(vm.total - vm.available),
            mem_total_bytes=int(vm.total), swap_used_bytes=int(psutil.swap_memory().used),
            cpu_busy_s=cpu_busy_s(), self_cpu_s=_cpu_s(self._self, children=False),
            cpu_user_pct=user, cpu_system_pct=system, cpu_iowait_pct=iowait,
        )

    def foreign_on(self, cpus: frozenset[int], exclude: frozenset[int],
                   ) -> dict[int, tuple[int, float]]:
        """(CPU, CPU seconds since the last scan) of each process outside ``exclude``
        last seen on one of ``cpus`` (``Process.cpu_num``).

        Only names suspects: ``cpu_num`` is the CPU a process ran on last, so a
        process that hops between CPUs is attributed to where it was caught.
        The first scan only primes the counters.
        """
        out: dict[int, tuple[int, float]] = {}
        seen: dict[int, float] = {}
        for p in psutil.process_iter(["pid", "cpu_num", "cpu_times"]):
            info = p.info
            times = info.get("cpu_times")
            if times is None or info["pid"] in exclude:
                continue
            total = times.user + times.system
            seen[info["pid"]] = total
            prev = self._seen_cpu_s.get(info["pid"])
            if prev is not None and info.get("cpu_num") in cpus and total > prev:
                out[info["pid"]] = (info["cpu_num"], total - prev)
        self._seen_cpu_s = seen
        return out

    def _proc(self, pid: int) -> psutil.Process:
        p = self._procs.get(pid)
        if p is None:
            p = psutil.Process(pid)
            p.cpu_percent()  # prime
            self._procs[pid] = p
        return p

    def tree(self, root_pid: int) -> TreeSample | None:
        """CPU %, RSS and threads summed over ``root_pid`` and all its descendants."""
        return self.trees([root_pid])[0]

    def trees(self, root_pids: list[int]) -> list[TreeSample | None]:
        """:meth:`tree` for several roots at once (runs packed side by side).

        One call for all roots, so that forgetting the processes that left one
        tree never drops the primed CPU counters of another's.
        """
        out: list[TreeSample | None] = []
        live: set[int] = set()
        for root_pid in root_pids:
            sample, members = self._one_tree(root_pid)
            out.append(sample)
            live |= members | {root_pid}
        for pid in [pid for pid in self._procs if pid not in live]:
            del self._procs[pid]
        return out

    def joined(self, tree: TreeSample | None, other: TreeSample | None) -> TreeSample | None:
        """``tree`` with ``other``'s processes counted in (a server a group of runs shares)."""
        if tree is None or other is None:
            return tree
        return TreeSample(tree.root_pid, tree.n_processes + other.n_processes,
                          tree.pids | other.pids, tree.cpu_pct + other.cpu_pct,
                          tree.rss_bytes + other.rss_bytes, tree.threads + other.threads,
                          tree.cpu_time_s + other.cpu_time_s)

    def _one_tree(self, root_pid: int) -> tuple[TreeSample | None, set[int]]:
        try:
            root = self._proc(root_pid)
            members = [root, *root.children(recursive=True)]
        except _GONE:
            self._procs.pop(root_pid, None)
            return None, set()
        cpu = cpu_s = 0.0
        rss = threads = 0
        pids = set()
        for proc in members:
            try:
                p = self._proc(proc.pid)
                with p.oneshot():
                    cpu += p.cpu_percent()
                    rss += p.memory_info().rss
                    threads += p.num_threads()
                    cpu_s += _cpu_s(p, children=True)
                pids.add(p.pid)
            except _GONE:
                self._procs.pop(proc.pid, None)
        return (TreeSample(root_pid, len(pids), frozenset(pids), cpu, rss, threads, cpu_s),
                {p.pid for p in members})
