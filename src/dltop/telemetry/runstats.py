"""Accumulates one run's telemetry into its :class:`RunTelemetry` summary.

The summary covers the **measured window** only: from the end of the last
warm-up iteration (or, without warm-up, the start of the first measured step:
its end minus its seconds) to the end of the last measured iteration. The
engine passes every iteration's end (``t_mono_ns``, the child's monotonic
clock, comparable with the sampler's) to :meth:`RunAccumulator.iteration`.
Readings arrive before the iteration event that tells where they belong, so a
reading waits in a pending list until an iteration end at or after it is known
(then it is inside the window, or before its start and dropped); readings after
the last measured iteration are still pending at the end and never counted.
The pending list holds the readings since the last iteration end (bounded by
:data:`MAX_PENDING`, oldest dropped first: those are start-up readings).
Only ``energy_run_j`` covers the whole run, spawn to exit. A serve run's runner waits
before its load with nothing sent (:meth:`RunAccumulator.idle`): the GPUs' mean power
over that wait is the run's idle power (``idle_power_w``, docs/serving.md).

The window's energy is the GPUs' counters interpolated at its two edges
(:mod:`dltop.telemetry.edges`), so each GPU's counter and power readings around
the edges are kept apart from the window's (``_edges``, trimmed as the window
moves: the readings between the edges are not needed for it).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import replace

from dltop.telemetry.contamination import CPU_FOREIGN_THRESHOLD_PCT, cpu_reason, foreign_cpu_pct
from dltop.telemetry.cpuenergy import CpuEnergyTrack
from dltop.telemetry.edges import EDGE_SLACK, Reading, keep_for_edges, window_energy
from dltop.telemetry.host import process_name
from dltop.telemetry.rapl import RaplSample
from dltop.telemetry.values import GpuSample, HostSample, RunTelemetry

THROTTLE_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}
MAX_PENDING = 100_000
"""Readings kept while waiting for an iteration end (about 20 min at 10 Hz x 8 GPUs)."""
NO_WINDOW = "no measured iteration: no measured window to summarise"


def throttle_names(mask: int) -> str:
    """Comma-separated names of the set clock-event bits (``gpu_idle`` excluded)."""
    return ",".join(name for bit, name in THROTTLE_BITS.items() if mask & bit and bit != 0x1)


class _Stats:
    """Aggregates of the readings fed to it (the window's, or the whole run's)."""

    def __init__(self) -> None:
        self.util_sum = 0.0
        self.util_n = 0
        self.util_peak: float | None = None
        self.mem_peak: int | None = None
        self.own_mem_peak: int | None = None
        self.energy_first: dict[int, tuple[int, float]] = {}  # gpu -> (t ns, J)
        self.energy_last: dict[int, tuple[int, float]] = {}
        self.power_sum = 0.0
        self.power_n = 0
        self.integrated_j: dict[int, float] = {}
        self.first_power: dict[int, int] = {}  # gpu -> t ns
        self.last_power: dict[int, tuple[int, float]] = {}
        self.throttle = 0
        self.sm_first: float | None = None
        self.sm_last: float | None = None
        self.gpu_checked = False
        self.gpu_foreign: int | None = None  # first foreign pid seen on a run's GPU
        self.cpu_sum = 0.0
        self.cpu_n = 0
        self.split_sum: dict[str, float] = {}  # user/system/iowait -> sum of readings' %
        self.split_n: dict[str, int] = {}
        self.rss_peak: int | None = None
        self.tree_cpu_sum = 0.0
        self.tree_n = 0
        self.host_first: HostSample | None = None
        self.host_last: HostSample | None = None
        self.gpu_n = 0
        self.gpu_n_by: dict[int, int] = {}  # gpu -> readings
        self.host_n = 0

    def add_gpu(self, s: GpuSample, tree_pids: frozenset[int]) -> None:
        self.gpu_n += 1
        self.gpu_n_by[s.index] = self.gpu_n_by.get(s.index, 0) + 1
        if s.gpu_util_pct is not None:
            self.util_sum += s.gpu_util_pct
            self.util_n += 1
            self.util_peak = max(self.util_peak or 0.0, s.gpu_util_pct)
        if s.mem_used_bytes is not None:
            self.mem_peak = max(self.mem_peak or 0, s.mem_used_bytes)
        if s.power_w is not None:
            self.power_sum += s.power_w
            self.power_n += 1
            prev = self.last_power.get(s.index)
            if prev is not None:
                dt = (s.t_mono_ns - prev[0]) / 1e9
                self.integrated_j[s.index] = (self.integrated_j.get(s.index, 0.0)
                                              + (prev[1] + s.power_w) / 2.0 * dt)
            self.first_power.setdefault(s.index, s.t_mono_ns)
            self.last_power[s.index] = (s.t_mono_ns, s.power_w)
        if s.energy_j is not None:
            self.energy_first.setdefault(s.index, (s.t_mono_ns, s.energy_j))
            self.energy_last[s.index] = (s.t_mono_ns, s.energy_j)
        if s.throttle_reasons is not None:
            self.throttle |= s.throttle_reasons
        if s.sm_clock_mhz is not None:
            if self.sm_first is None:
                self.sm_first = s.sm_clock_mhz
            self.sm_last = s.sm_clock_mhz
        if s.processes is not None:
            self.gpu_checked = True
            own = sum(p.used_memory_bytes or 0 for p in s.processes if p.pid in tree_pids)
            if any(p.pid in tree_pids for p in s.processes):
                self.own_mem_peak = max(self.own_mem_peak or 0, own)
            foreign = [p.pid for p in s.processes
                       if p.pid not in tree_pids and p.pid != os.getpid()]
            if foreign and self.gpu_foreign is None:
                self.gpu_foreign = foreign[0]

    def add_host(self, h: HostSample) -> None:
        self.host_n += 1
        if h.cpu_pct_per_core:
            self.cpu_sum += sum(h.cpu_pct_per_core) / len(h.cpu_pct_per_core)
            self.cpu_n += 1
        for name, pct in (("user", h.cpu_user_pct), ("system", h.cpu_system_pct),
                          ("iowait", h.cpu_iowait_pct)):
            if pct is not None:
                self.split_sum[name] = self.split_sum.get(name, 0.0) + pct
                self.split_n[name] = self.split_n.get(name, 0) + 1
        if h.tree is not None:
            self.rss_peak = max(self.rss_peak or 0, h.tree.rss_bytes)
            self.tree_cpu_sum += h.tree.cpu_pct
            self.tree_n += 1
            if self.host_first is None:
                self.host_first = h
            self.host_last = h

    def split_mean(self, name: str) -> float | None:
        """Mean host ``user``/``system``/``iowait`` % over the readings that had it."""
        n = self.split_n.get(name, 0)
        return self.split_sum[name] / n if n else None

    def energy(self, n_gpus: int, window_s: float | None) -> tuple[float | None, str | None]:
        """Energy of the GPUs: counter delta (else trapezoid of power) between the
        first and last readings, scaled to ``window_s`` when given (the readings
        span a little less than the window: up to one tick at each end)."""
        def scaled(per_gpu: dict[int, float], spans: dict[int, float]) -> float:
            if window_s is None:
                return sum(per_gpu.values())
            return sum(j * window_s / spans[i] for i, j in per_gpu.items() if spans[i] > 0)

        first, last = self.energy_first, self.energy_last
        if last and len(last) == n_gpus:
            delta = {i: last[i][1] - first[i][1] for i in last}
            spans = {i: (last[i][0] - first[i][0]) / 1e9 for i in last}
            if (window_s is None or all(s > 0 for s in spans.values())) and (
                    sum(delta.values()) > 0 or self.gpu_n > n_gpus):
                return scaled(delta, spans), "counter"
        if self.last_power:
            spans = {i: (t - self.first_power[i]) / 1e9 for i, (t, _) in self.last_power.items()}
            if window_s is None or all(s > 0 for s in spans.values()):
                return scaled(self.integrated_j, spans), "integrated"
            if window_s is not None and self.power_n:  # one reading per GPU
                return self.power_sum / self.power_n * n_gpus * window_s, "mean_power"
        return None, None


class RunAccumulator:
    """Everything needed for a run's summary, fed sample by sample (under the sampler lock).

    Args:
        run_id: the run.
        root_pid: its runner process (its whole tree is the run's).
        gpu_indices: the GPUs it holds.
        cpu_affinity: the CPUs it is pinned to (None: not pinned, no CPU
            contamination check).
        cpu_energy_unavailable: why the host gives no RAPL CPU energy (None: it does).
    """

    def __init__(self, run_id: int, root_pid: int, gpu_indices: tuple[int, ...],
                 cpu_affinity: tuple[int, ...] | None = None,
                 cpu_energy_unavailable: str | None = "RAPL not read for this run") -> None:
        self.run_id = run_id
        self.root_pid = root_pid
        self.gpus = set(gpu_indices)
        self.cpus = frozenset(cpu_affinity) if cpu_affinity else None
        self.tree_pids: frozenset[int] = frozenset({root_pid})
        self._window = _Stats()
        self._run = _Stats()
        self._pending: deque[GpuSample | HostSample] = deque(maxlen=MAX_PENDING)
        self._edges: dict[int, list[Reading]] = {i: [] for i in self.gpus}
        self._cpu_energy = CpuEnergyTrack(cpu_energy_unavailable)
        self._warm_end_ns: int | None = None
        self._start_ns: int | None = None
        self._end_ns: int | None = None
        self._prev_host: HostSample | None = None
        self.wants_scan = False
        """The last host interval's foreign CPU share was over the threshold."""
        self._suspects: dict[int, float] = {}  # pid -> foreign CPU seconds on our CPUs
        self.simulated = False
        self.read_errors = 0
        """Readings meant for this run that raised (the sampler skipped them)."""
        self._idle_ns: tuple[int, int] | None = None
        self._idle_w: dict[int, tuple[float, int]] = {}  # gpu -> (sum of W, readings)

    # feeding --------------------------------------------------------------------
    def add_gpu(self, s: GpuSample) -> None:
        """Feed one GPU reading (ignored unless the GPU belongs to the run)."""
        if s.index not in self.gpus:
            return
        self.simulated = self.simulated or s.simulated
        self._run.add_gpu(s, self.tree_pids)
        self._add_idle(s)
        edges = self._edges[s.index]
        # Power readings shape the interpolation between counter readings; a GPU that
        # has given no counter reading yet (or has no counter) keeps none: nothing to
        # interpolate, and nothing to trim on every iteration.
        if s.energy_j is not None or (edges and s.power_w is not None):
            edges.append((s.t_mono_ns, s.power_w, s.energy_j))
            if len(edges) > MAX_PENDING:  # no window edge for 20 min: start-up readings go
                del edges[:MAX_PENDING // 2]
        self._place(s)

    def add_host(self, h: HostSample) -> None:
        """Feed one host reading (with the run's process tree)."""
        if h.tree is not None:
            self.tree_pids = h.tree.pids | {self.root_pid}
        self._run.add_host(h)
        if self.cpus is not None and h.tree is not None:
            prev, self._prev_host = self._prev_host, h
            pct = foreign_cpu_pct(prev, h, self.cpus) if prev is not None else None
            opened = self._start_ns is not None or self._warm_end_ns is not None
            self.wants_scan = opened and pct is not None and pct > CPU_FOREIGN_THRESHOLD_PCT
        self._place(h)

    def add_rapl(self, s: RaplSample) -> None:
        """Feed one reading of the host's RAPL counters."""
        self._cpu_energy.add(s)

    def add_suspects(self, found: dict[int, tuple[int, float]]) -> None:
        """Processes last seen on a CPU, by pid: (that CPU, CPU seconds they used)."""
        for pid, (cpu, sec) in found.items():
            if pid not in self.tree_pids and self.cpus is not None and cpu in self.cpus:
                self._suspects[pid] = self._suspects.get(pid, 0.0) + sec

    def idle(self, start_ns: int, end_ns: int) -> None:
        """The runner waited from ``start_ns`` to ``end_ns`` (monotonic ns) with nothing
        sent, just before its load: the GPU readings between them give the idle power."""
        self._idle_ns = (start_ns, end_ns)
        self._cpu_energy.idle(start_ns, end_ns)
        for s in self._pending:  # the wait's readings so far (nothing is dropped before
            if isinstance(s, GpuSample):  # the first iteration)
                self._add_idle(s)

    def _add_idle(self, s: GpuSample) -> None:
        if self._idle_ns is not None and s.power_w is not None \
                and self._idle_ns[0] <= s.t_mono_ns <= self._idle_ns[1]:
            w, n = self._idle_w.get(s.index, (0.0, 0))
            self._idle_w[s.index] = (w + s.power_w, n + 1)

    def _idle_figures(self) -> tuple[float | None, float | None, int | None]:
        """(idle power: the sum over the GPUs of each one's mean, the wait's seconds, its
        readings: the fewest of the GPUs'); all None without an idle wait."""
        if self._idle_ns is None or not self.gpus:
            return None, None, None
        fewest = min(self._idle_w.get(i, (0.0, 0))[1] for i in self.gpus)
        power = sum(w / n for w, n in self._idle_w.values()) if fewest else None
        return power, (self._idle_ns[1] - self._idle_ns[0]) / 1e9, fewest

    def iteration(self, t_mono_ns: int, seconds: float, warmup: bool) -> None:
        """An iteration ended at ``t_mono_ns`` (monotonic ns) after ``seconds``."""
        if warmup:
            if self._start_ns is None:
                self._warm_end_ns = t_mono_ns
                self._settle()
                self._trim_edges()
            return
        if self._start_ns is None:
            self._start_ns = (self._warm_end_ns if self._warm_end_ns is not None
                              else t_mono_ns - int(seconds * 1e9))
        self._end_ns = max(self._end_ns or t_mono_ns, t_mono_ns)
        self._settle()
        self._trim_edges()

    def _trim_edges(self) -> None:
        end = self._end_ns if self._end_ns is not None else self._warm_end_ns
        self._cpu_energy.trim(self._start_ns, end)
        for index, readings in self._edges.items():
            if len(readings) > EDGE_SLACK:  # a few counter intervals: trimming is rare
                self._edges[index] = keep_for_edges(readings, self._start_ns, end)

    def _place(self, s: GpuSample | HostSample) -> None:
        start, end = self._start_ns, self._end_ns
        if start is None:
            if self._warm_end_ns is None or s.t_mono_ns >= self._warm_end_ns:
                self._pending.append(s)
        elif s.t_mono_ns > (end or start):
            self._pending.append(s)
        elif s.t_mono_ns >= start:
            self._commit(s)

    def _settle(self) -> None:
        """Drop pending readings before the window; commit those now known inside it."""
        pending, self._pending = self._pending, deque(maxlen=MAX_PENDING)
        for s in pending:
            self._place(s)

    def _commit(self, s: GpuSample | HostSample) -> None:
        if isinstance(s, GpuSample):
            self._window.add_gpu(s, self.tree_pids)
        else:
            self._window.add_host(s)

    # summary ----------------------------------------------------------------------
    def _edge_energy(self, start_ns: int, end_ns: int,
                     ) -> tuple[float | None, float | None, str | None]:
        """The GPUs' counters interpolated at the window's edges: (J, bound J, source).

        (None, None, None) unless every GPU's counter can be told at both edges.
        """
        if not self._edges:
            return None, None, None
        total = bound = 0.0
        for readings in self._edges.values():
            got = window_energy(readings, start_ns, end_ns)
            if got is None:
                return None, None, None
            total, bound = total + got[0], bound + got[1]
        return total, bound, "counter"

    def summary(self, samples: int | None) -> RunTelemetry:
        """The run's summary over its measured window.

        Args:
            samples: training samples of the measured iterations (gives joules/sample).
        """
        n_gpus = len(self.gpus)
        run_energy, _ = self._run.energy(n_gpus, None)
        if self._start_ns is None or self._end_ns is None:
            return RunTelemetry(energy_run_j=run_energy, telemetry_note=NO_WINDOW,
                                cpu_energy_note=f"n/a: {NO_WINDOW}",
                                telemetry_simulated=self.simulated,
                                telemetry_read_errors=self.read_errors)
        w = self._window
        window_s = (self._end_ns - self._start_ns) / 1e9
        energy, bound, source = self._edge_energy(self._start_ns, self._end_ns)
        cpu = self._cpu_energy.summary(self._start_ns, self._end_ns, samples)
        if energy is None:
            energy, source = w.energy(n_gpus, window_s)
        reasons: list[str] = []
        if w.gpu_foreign is not None:
            reasons.append(f"gpu: pid {w.gpu_foreign} ({process_name(w.gpu_foreign)})")
        cpu_pct = None
        if self.cpus is not None and w.host_first is not None and w.host_last is not None:
            cpu_pct = foreign_cpu_pct(w.host_first, w.host_last, self.cpus)
            if cpu_pct is not None and cpu_pct > CPU_FOREIGN_THRESHOLD_PCT:
                top = max(self._suspects.items(), key=lambda kv: kv[1], default=None)
                reasons.append(cpu_reason(cpu_pct, self.cpus,
                                          (top[0], process_name(top[0])) if top else None))
        checked = w.gpu_checked or cpu_pct is not None
        idle_w, idle_s, idle_n = self._idle_figures()
        return replace(  # the CPU energy columns as the track filled them, the rest here
            cpu, gpu_util_mean_pct=w.util_sum / w.util_n if w.util_n else None,
            gpu_util_peak_pct=w.util_peak, gpu_mem_peak_bytes=w.mem_peak,
            gpu_mem_run_peak_bytes=w.own_mem_peak,
            power_mean_w=(w.power_sum / w.power_n * (n_gpus or 1) if w.power_n else None),
            energy_j=energy, energy_source=source, energy_bound_j=bound,
            joules_per_sample=(energy / samples if energy is not None and samples else None),
            host_cpu_mean_pct=w.cpu_sum / w.cpu_n if w.cpu_n else None,
            host_cpu_user_pct=w.split_mean("user"), host_cpu_system_pct=w.split_mean("system"),
            host_cpu_iowait_pct=w.split_mean("iowait"),
            rss_peak_bytes=w.rss_peak,
            tree_cpu_mean_pct=w.tree_cpu_sum / w.tree_n if w.tree_n else None,
            throttle_reasons=throttle_names(w.throttle) if w.gpu_n else None,
            sm_clock_start_mhz=w.sm_first, sm_clock_end_mhz=w.sm_last,
            contaminated=bool(reasons) if checked else None,
            contamination="; ".join(reasons) or None, cpu_foreign_pct=cpu_pct,
            window_s=window_s, energy_run_j=run_energy,
            telemetry_simulated=self.simulated, gpu_samples=w.gpu_n, host_samples=w.host_n,
            gpu_readings=min((w.gpu_n_by.get(i, 0) for i in self.gpus), default=None),
            host_readings=w.host_n,
            telemetry_read_errors=self.read_errors,
            idle_power_w=idle_w, idle_window_s=idle_s, idle_readings=idle_n,
            cpu_idle_power_w=self._cpu_energy.idle_power_w,
        )
