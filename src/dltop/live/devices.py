"""Device frames for a live viewer: every GPU and the host, read in one call.

During a Slurm run the run's GPUs are on other hosts: :class:`RemoteGpuReader` reads
the newest window of each of them from the database (the node agents' rows,
``gpu_samples.node``), shown after the local devices as ``node:gpuN``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dltop.live.nodegpus import OnNode
from dltop.store import samples
from dltop.telemetry.host import HostSampler
from dltop.telemetry.runstats import throttle_names
from dltop.telemetry.values import GpuBackend, GpuSample, GpuStatic, HostSample

SLOW_EVERY = 4
"""Temperature, clocks and processes are read on every 4th frame (they change slowly)."""


@dataclass(frozen=True)
class GpuProcessRow:
    """One process on one GPU, as the viewer's process panel lists it."""

    gpu_index: int
    pid: int
    user: str
    """Owner's name (``?`` when the process is gone or another namespace's)."""
    command: str
    """Its command line (or name), as the kernel reports it."""
    gpu_mem_bytes: int | None
    sm_util_pct: float | None


@dataclass(frozen=True)
class DeviceFrame:
    """One reading of every device."""

    statics: tuple[GpuStatic, ...]
    gpus: tuple[GpuSample, ...]
    host: HostSample | None
    gpu_unavailable: str | None
    """Why there are no GPUs (None when there are, or when there are none by choice)."""
    processes: tuple[GpuProcessRow, ...] = ()
    """Processes on every GPU (from the last slow read), by GPU then memory, largest first."""
    remote: tuple[RemoteGpu, ...] = ()
    """The running run's GPUs on other nodes (a Slurm run), by node then index."""


@dataclass(frozen=True)
class RemoteGpu(OnNode):
    """A GPU of another node: its newest stored window (0.5 s, the node agent's)."""

    util_pct: float | None
    power_w: float | None
    mem_used_bytes: int | None
    t_wall_s: float | None
    """Epoch seconds of the window's start (how fresh it is)."""
    simulated: bool


class RemoteGpuReader:
    """The newest window of each remote GPU of a run, read incrementally.

    Each read asks only for the rows stored since the last one (``rowid`` past the
    last seen, through the ``run_id`` index): a long run's growing table is never
    read whole. Call from a worker thread with the viewer's read connection.
    """

    def __init__(self) -> None:
        self._run_id: int | None = None
        self._rowid = 0
        self._latest: dict[tuple[str, int], RemoteGpu] = {}

    def read(self, db: Any, run_id: int | None) -> tuple[RemoteGpu, ...]:
        """The run's remote GPUs (none for a local run, or with no run)."""
        if run_id != self._run_id:
            self._run_id, self._rowid, self._latest = run_id, 0, {}
        if run_id is None:
            return ()
        for r in samples.gpu_rows_after(db, run_id, self._rowid):
            self._rowid = max(self._rowid, int(r[0]))
            if r[1] is not None:
                self._latest[(str(r[1]), int(r[2]))] = RemoteGpu(
                    str(r[1]), int(r[2]), r[3], r[4], r[5], r[6], bool(r[7]))
        return tuple(v for _, v in sorted(self._latest.items()))


def throttle_text(sample: GpuSample) -> str:
    """Names of the clock-event reasons the GPU reports (``gpu_idle`` left out), or ''."""
    return throttle_names(sample.throttle_reasons) if sample.throttle_reasons else ""


def describe_process(pid: int) -> tuple[str, str]:
    """(user, command line) of a process, ``?`` for what cannot be read."""
    import psutil

    try:
        p = psutil.Process(pid)
        with p.oneshot():
            try:
                user = p.username()
            except (psutil.AccessDenied, KeyError):  # KeyError: a uid with no passwd entry
                user = "?"
            try:
                command = " ".join(p.cmdline()) or p.name()
            except psutil.AccessDenied:
                command = p.name()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return "?", "?"
    return user, command


class DevicePoller:
    """Reads every GPU of a backend and the host; call :meth:`poll` from a worker thread.

    Temperature, clocks, throttle reasons and processes are carried over from
    the last slow read, so every frame has them. A GPU process's user and
    command are looked up once per pid (they do not change while it lives).
    """

    def __init__(self, backend: GpuBackend,
                 host: Callable[[], HostSample | None] | None = None,
                 describe: Callable[[int], tuple[str, str]] | None = None) -> None:
        self._backend = backend
        self._host = host if host is not None else HostSampler().sample
        self._describe = describe
        self._n = backend.device_count()
        self._statics = tuple(backend.static(i) for i in range(self._n))
        self._slow: dict[int, GpuSample] = {}
        self._frames = 0
        self._who: dict[int, tuple[str, str]] = {}
        self._processes: tuple[GpuProcessRow, ...] = ()

    def poll(self) -> DeviceFrame:
        """Read all devices once."""
        slow = self._frames % SLOW_EVERY == 0
        self._frames += 1
        gpus = []
        for i in range(self._n):
            s = self._backend.sample(i, slow)
            if slow:
                self._slow[i] = s
            elif i in self._slow:
                last = self._slow[i]
                s = replace(s, temperature_c=last.temperature_c,
                            sm_clock_mhz=last.sm_clock_mhz, mem_clock_mhz=last.mem_clock_mhz,
                            throttle_reasons=last.throttle_reasons, processes=last.processes)
            gpus.append(s)
        if slow:
            self._processes = self._process_rows(gpus)
        reason = self._backend.unavailable_reason() if not self._n else None
        return DeviceFrame(self._statics, tuple(gpus), self._host(), reason, self._processes)

    def _process_rows(self, gpus: list[GpuSample]) -> tuple[GpuProcessRow, ...]:
        rows = []
        for s in gpus:
            for p in s.processes or ():
                who = self._who.get(p.pid)
                if who is None:
                    who = self._who[p.pid] = (self._describe or describe_process)(p.pid)
                rows.append(GpuProcessRow(s.index, p.pid, *who, p.used_memory_bytes,
                                          p.sm_util_pct))
        live = {r.pid for r in rows}
        self._who = {pid: who for pid, who in self._who.items() if pid in live}
        rows.sort(key=lambda r: (r.gpu_index, -(r.gpu_mem_bytes or 0), r.pid))
        return tuple(rows)
