"""Accumulates one run's telemetry into its :class:`RunTelemetry` summary."""

from __future__ import annotations

import os

from dltop.telemetry.model import GpuSample, HostSample, RunTelemetry

THROTTLE_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def throttle_names(mask: int) -> str:
    """Comma-separated names of the set clock-event bits (``gpu_idle`` excluded)."""
    return ",".join(name for bit, name in THROTTLE_BITS.items() if mask & bit and bit != 0x1)


class RunAccumulator:
    """Everything needed for a run's summary, fed sample by sample (sampler thread only)."""

    def __init__(self, run_id: int, root_pid: int, gpu_indices: tuple[int, ...]) -> None:
        self.run_id = run_id
        self.root_pid = root_pid
        self.gpus = set(gpu_indices)
        self.tree_pids: frozenset[int] = frozenset({root_pid})
        self._util_sum = 0.0
        self._util_n = 0
        self._util_peak: float | None = None
        self._mem_peak: int | None = None
        self._own_mem_peak: int | None = None
        self._energy_first: dict[int, float] = {}
        self._energy_last: dict[int, float] = {}
        self._power_sum = 0.0
        self._power_n = 0
        self._integrated_j = 0.0
        self._last_power: dict[int, tuple[int, float]] = {}
        self._throttle = 0
        self._sm_first: float | None = None
        self._sm_last: float | None = None
        self._contaminated: bool | None = None
        self._cpu_sum = 0.0
        self._cpu_n = 0
        self._rss_peak: int | None = None
        self.simulated = False
        self.gpu_samples = 0
        self.host_samples = 0
        self.read_errors = 0
        """Readings meant for this run that raised (the sampler skipped them)."""

    def add_gpu(self, s: GpuSample) -> None:
        """Feed one GPU reading (ignored unless the GPU belongs to the run)."""
        if s.index not in self.gpus:
            return
        self.gpu_samples += 1
        self.simulated = self.simulated or s.simulated
        if s.gpu_util_pct is not None:
            self._util_sum += s.gpu_util_pct
            self._util_n += 1
            self._util_peak = max(self._util_peak or 0.0, s.gpu_util_pct)
        if s.mem_used_bytes is not None:
            self._mem_peak = max(self._mem_peak or 0, s.mem_used_bytes)
        if s.power_w is not None:
            self._power_sum += s.power_w
            self._power_n += 1
            prev = self._last_power.get(s.index)
            if prev is not None:
                dt = (s.t_mono_ns - prev[0]) / 1e9
                self._integrated_j += (prev[1] + s.power_w) / 2.0 * dt
            self._last_power[s.index] = (s.t_mono_ns, s.power_w)
        if s.energy_j is not None:
            self._energy_first.setdefault(s.index, s.energy_j)
            self._energy_last[s.index] = s.energy_j
        if s.throttle_reasons is not None:
            self._throttle |= s.throttle_reasons
        if s.sm_clock_mhz is not None:
            if self._sm_first is None:
                self._sm_first = s.sm_clock_mhz
            self._sm_last = s.sm_clock_mhz
        if s.processes is not None:
            own = sum(p.used_memory_bytes or 0 for p in s.processes if p.pid in self.tree_pids)
            if any(p.pid in self.tree_pids for p in s.processes):
                self._own_mem_peak = max(self._own_mem_peak or 0, own)
            foreign = any(p.pid not in self.tree_pids and p.pid != os.getpid()
                          for p in s.processes)
            self._contaminated = bool(self._contaminated) or foreign

    def add_host(self, h: HostSample) -> None:
        """Feed one host reading."""
        self.host_samples += 1
        if h.cpu_pct_per_core:
            self._cpu_sum += sum(h.cpu_pct_per_core) / len(h.cpu_pct_per_core)
            self._cpu_n += 1
        if h.tree is not None:
            self.tree_pids = h.tree.pids | {self.root_pid}
            self._rss_peak = max(self._rss_peak or 0, h.tree.rss_bytes)

    def summary(self, samples: int | None) -> RunTelemetry:
        """The run's summary; ``samples`` (training samples processed) gives joules/sample."""
        energy: float | None = None
        source: str | None = None
        if self._energy_last and len(self._energy_last) == len(self._energy_first):
            delta = sum(self._energy_last[i] - self._energy_first[i] for i in self._energy_last)
            if delta > 0 or self.gpu_samples > len(self.gpus):
                energy, source = delta, "counter"
        if energy is None and self._last_power:
            energy, source = self._integrated_j, "integrated"
        per_tick = len(self.gpus) or 1
        return RunTelemetry(
            gpu_util_mean_pct=self._util_sum / self._util_n if self._util_n else None,
            gpu_util_peak_pct=self._util_peak, gpu_mem_peak_bytes=self._mem_peak,
            gpu_mem_run_peak_bytes=self._own_mem_peak,
            power_mean_w=(self._power_sum / self._power_n * per_tick
                          if self._power_n else None),
            energy_j=energy, energy_source=source,
            joules_per_sample=(energy / samples if energy is not None and samples else None),
            host_cpu_mean_pct=self._cpu_sum / self._cpu_n if self._cpu_n else None,
            rss_peak_bytes=self._rss_peak,
            throttle_reasons=throttle_names(self._throttle) if self.gpu_samples else None,
            sm_clock_start_mhz=self._sm_first, sm_clock_end_mhz=self._sm_last,
            contaminated=self._contaminated, telemetry_simulated=self.simulated,
            gpu_samples=self.gpu_samples, host_samples=self.host_samples,
            telemetry_read_errors=self.read_errors,
        )
