"""The background sampler: one thread per dltop process, never the event loop.

Each GPU tick (default 10 Hz) reads every GPU's fast fields; every
``slow_every``-th tick also the slow ones; the host and each active run's
process tree are read at ``host_hz`` (default 2 Hz). Readings feed the active
runs' :class:`~dltop.telemetry.runstats.RunAccumulator` at full rate (a GPU
reading only the run that holds that GPU), and are stored downsampled: one row
per GPU and one host row per active run (one when idle) per ``window_s``
(default 0.5 s, i.e. 2 Hz) with min/max/mean (:mod:`dltop.telemetry.windows`), handed
to ``on_batch`` about once a second. Several runs at once happen only when the engine packs jobs on
disjoint devices; a GPU row belongs to the run holding that GPU, or to the only
run when one runs. The sampler counts the ticks it had to skip instead of drifting
(each run's ``sampler_achieved_hz`` says what it really did).

Each stored row carries ``t_wall_s``, the epoch seconds of its window's start,
derived from one (monotonic, wall) anchor (:mod:`dltop.telemetry.clock`). A run's
summary covers its measured window only: the engine passes each iteration's end
to :meth:`Sampler.iteration` (see :mod:`dltop.telemetry.runstats`).

A reading that raises (a GPU fallen off the bus, a host read failing) is
skipped, never fatal: the thread logs each distinct cause once, keeps sampling,
and counts the failure in the summary of every run the reading was meant for
(``telemetry_read_errors``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from dltop.errors import UserError
from dltop.telemetry.clock import anchor
from dltop.telemetry.host import HostSampler
from dltop.telemetry.rapl import RaplReader
from dltop.telemetry.runstats import RunAccumulator
from dltop.telemetry.values import GpuBackend, GpuSample, HostSample, RunTelemetry, TreeSample
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow, Window

MAX_HZ = 100.0
SCAN_EVERY_S = 1.0
"""Least seconds between two scans for the processes behind foreign CPU use."""
MAX_LOGGED_CAUSES = 32
"""Distinct failure causes logged per sampler; later new ones are only counted."""

log = logging.getLogger(__name__)
T = TypeVar("T")


def check_rate(name: str, hz: float) -> float:
    """Validate a sampling rate.

    Raises:
        UserError: not a number in (0, 100].
    """
    if isinstance(hz, bool) or not isinstance(hz, int | float) or not 0 < hz <= MAX_HZ:
        raise UserError(f"{name}: expected a rate in Hz with 0 < rate <= {MAX_HZ:g}, got {hz!r}")
    return float(hz)


class Sampler:
    """Samples GPUs and host in a daemon thread; thread-safe run attribution."""

    def __init__(self, backend: GpuBackend, on_batch: Callable[[Batch], None],
                 gpu_hz: float = 10.0, host_hz: float = 2.0, window_s: float = 0.5,
                 flush_s: float = 1.0) -> None:
        self.backend = backend
        self.gpu_hz = check_rate("gpu rate", gpu_hz)
        self.host_hz = check_rate("host rate", host_hz)
        self.slow_every = max(1, round(self.gpu_hz / self.host_hz))
        self._on_batch = on_batch
        self._window_ns = int(window_s * 1e9)
        self._flush_ns = int(flush_s * 1e9)
        self._host = HostSampler()
        self._rapl = RaplReader()
        self._lock = threading.Lock()
        self._runs: dict[int, tuple[RunAccumulator, int, int]] = {}  # id -> (acc, ns, ticks)
        self.shared_roots: dict[int, int] = {}
        """Run id -> a process whose tree is the run's own too: the server a group of serve
        runs shares (:mod:`dltop.jobs.servergroup`), outside the run's runner's tree."""
        self._n_gpus = backend.device_count()
        self._window: Window | None = None
        self._pending_gpu: list[GpuWindow] = []
        self._pending_host: list[HostWindow] = []
        self._last_flush_ns = time.monotonic_ns()
        self._temps: dict[int, float] = {}
        self._powers: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.missed_ticks = 0
        self.read_errors = 0
        """Readings that raised since start (all runs and idle time)."""
        self._causes: set[tuple[str, str]] = set()
        self._last_scan_ns = 0

    # lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        """Start the sampling thread."""
        self._thread = threading.Thread(target=self._loop, name="dltop-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and hand over what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._close_window()
        self._flush()

    def temperatures(self) -> dict[int, float]:
        """The last temperature read of each GPU (slow fields), in degrees Celsius."""
        with self._lock:
            return dict(self._temps)

    def powers(self) -> dict[int, float]:
        """The last power draw read of each GPU, in watts."""
        with self._lock:
            return dict(self._powers)

    # run attribution ---------------------------------------------------------
    def begin_run(self, run_id: int, root_pid: int, gpu_indices: tuple[int, ...],
                  cpu_affinity: tuple[int, ...] | None = None) -> None:
        """Attribute readings to ``run_id`` (its process tree under ``root_pid``).

        ``cpu_affinity``: the CPUs the run is pinned to, checked for foreign use.
        """
        acc = RunAccumulator(run_id, root_pid, gpu_indices, cpu_affinity,
                             self._rapl.unavailable_reason())
        # Every GPU reading during the run is simulated, and the GPU rows a lone CPU run
        # owns are stored under its id: its summary says so, as a GPU run's does (exports
        # read this flag, not the samples).
        acc.simulated = bool(self.backend.simulated and self._n_gpus)
        with self._lock:
            self._runs[run_id] = (acc, time.monotonic_ns(), self.ticks)

    def iteration(self, run_id: int, t_mono_ns: int, seconds: float, warmup: bool) -> None:
        """One iteration of ``run_id`` ended at ``t_mono_ns``: moves its measured window."""
        with self._lock:
            entry = self._runs.get(run_id)
            if entry is not None:
                entry[0].iteration(t_mono_ns, seconds, warmup)

    def idle(self, run_id: int, start_ns: int, end_ns: int) -> None:
        """``run_id``'s runner waited idle before its load (:meth:`RunAccumulator.idle`)."""
        with self._lock:
            entry = self._runs.get(run_id)
            if entry is not None:
                entry[0].idle(start_ns, end_ns)

    def end_run(self, run_id: int, samples: int | None = None) -> RunTelemetry | None:
        """Stop attributing to ``run_id`` and return its summary over the measured window.

        ``samples``: training samples of the measured iterations (joules per sample).
        """
        with self._lock:
            entry = self._runs.pop(run_id, None)
        if entry is None:
            return None
        acc, t0, ticks0 = entry
        elapsed = (time.monotonic_ns() - t0) / 1e9
        hz = (self.ticks - ticks0) / elapsed if elapsed > 0 else None
        return dataclasses.replace(acc.summary(samples), sampler_achieved_hz=hz)

    # sampling ------------------------------------------------------------------
    def _loop(self) -> None:
        period_ns = int(1e9 / self.gpu_hz)
        next_ns = time.monotonic_ns()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a bug past the guarded reads: keep the thread alive
                self._failed("tick", exc)
            next_ns += period_ns
            now = time.monotonic_ns()
            if now > next_ns:
                skipped = (now - next_ns) // period_ns + 1
                self.missed_ticks += int(skipped)
                next_ns += skipped * period_ns
            self._stop.wait((next_ns - now) / 1e9)

    def tick(self) -> None:
        """One GPU tick (plus host every ``slow_every`` ticks); public for tests."""
        slow = self.ticks % self.slow_every == 0
        self.ticks += 1
        readings = [(i, self._read(f"GPU {i}", self.backend.sample, i, slow))
                    for i in range(self._n_gpus)]
        gpus = tuple(s for _, s in readings if s is not None)
        lost_gpus = {i for i, s in readings if s is None}
        with self._lock:
            runs = tuple(acc for acc, _, _ in self._runs.values())
        host = self._read("host", self._host.sample) if slow else None
        # RAPL on every tick, as the GPUs' power: a few sysfs reads, and a 0.1 s step
        # at each window edge instead of the host's 0.5 s.
        rapl = self._read("cpu energy", self._rapl.read, time.monotonic_ns()) if runs else None
        host_lost = slow and host is None
        trees: dict[int, TreeSample | None] = {}
        if host is not None:
            shared = [self.shared_roots.get(r.run_id) for r in runs]
            extra = sorted({pid for pid in shared if pid is not None})
            read = self._read("process trees", self._host.trees,
                              [r.root_pid for r in runs] + extra)
            host_lost = read is None
            got = dict(zip(extra, (read or [])[len(runs):], strict=False))
            trees = {r.run_id: self._host.joined(t, got.get(pid) if pid else None)
                     for r, t, pid in zip(runs, (read or [None] * len(runs))[:len(runs)],
                                          shared, strict=True)}
        with self._lock:
            for run in runs:
                if run.run_id not in self._runs:
                    continue  # ended while we read
                run.read_errors += len(lost_gpus & run.gpus) + int(host_lost)
                for s in gpus:
                    run.add_gpu(s)
                if rapl is not None:
                    run.add_rapl(rapl)
                if host is not None:
                    run.add_host(dataclasses.replace(host, tree=trees[run.run_id]))
            scan = [(r, r.cpus, r.tree_pids) for r in runs if r.wants_scan and r.cpus]
            for s in gpus:
                if s.temperature_c is not None:
                    self._temps[s.index] = s.temperature_c
                if s.power_w is not None:
                    self._powers[s.index] = s.power_w
        if scan and time.monotonic_ns() - self._last_scan_ns >= SCAN_EVERY_S * 1e9:
            self._scan_foreign(scan)
        self._add_to_window(gpus, host, trees, runs)

    def _scan_foreign(self, scan: list[tuple[RunAccumulator, frozenset[int],
                                             frozenset[int]]]) -> None:
        """Name the processes behind foreign CPU use of the runs that have some."""
        self._last_scan_ns = time.monotonic_ns()
        cpus = frozenset(c for _, cs, _ in scan for c in cs)
        own = frozenset(p for _, _, pids in scan for p in pids) | {os.getpid()}
        found = self._read("foreign processes", self._host.foreign_on, cpus, own)
        if not found:
            return
        with self._lock:
            for run, _, _ in scan:
                run.add_suspects(found)

    def _read(self, what: str, fn: Callable[..., T], *args: object) -> T | None:
        """``fn(*args)``, or None when it raised (counted, each cause logged once)."""
        try:
            return fn(*args)
        except Exception as exc:
            self._failed(what, exc)
            return None

    def _failed(self, what: str, exc: Exception) -> None:
        self.read_errors += 1
        cause = (type(exc).__name__, str(exc))
        if cause in self._causes or len(self._causes) > MAX_LOGGED_CAUSES:
            return
        self._causes.add(cause)
        if len(self._causes) > MAX_LOGGED_CAUSES:
            log.warning("telemetry: more distinct read failures; counted, no longer logged")
        else:
            log.warning("telemetry: reading %s failed, skipped (logged once per cause): "
                        "%s: %s", what, *cause)

    def _add_to_window(self, gpus: tuple[GpuSample, ...], host: HostSample | None,
                       trees: dict[int, TreeSample | None],
                       runs: tuple[RunAccumulator, ...]) -> None:
        now = time.monotonic_ns()
        w = self._window
        if w is not None and (now - w.start_ns >= self._window_ns or w.runs != runs):
            self._close_window()
            w = None
        if w is None:
            w = self._window = Window(now, runs)
        w.add(gpus, host, trees)
        if now - self._last_flush_ns >= self._flush_ns:
            self._flush()

    def _close_window(self) -> None:
        w, self._window = self._window, None
        if w is not None:
            gpu, host = w.rows(anchor().wall(w.start_ns))
            self._pending_gpu += gpu
            self._pending_host += host

    def _flush(self) -> None:
        self._last_flush_ns = time.monotonic_ns()
        if self._pending_gpu or self._pending_host:
            batch = Batch(tuple(self._pending_gpu), tuple(self._pending_host))
            self._pending_gpu, self._pending_host = [], []
            self._on_batch(batch)
