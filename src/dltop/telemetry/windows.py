"""The sampler's stored rows: one window's readings (``window_s``, default 0.5 s)
brought down to a row per GPU and a host row per active run, with min/max/mean
(:mod:`dltop.telemetry.sampler` reads; this says what a window stores)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dltop.telemetry.runstats import RunAccumulator
from dltop.telemetry.values import GpuSample, HostSample, TreeSample


@dataclass(frozen=True)
class GpuWindow:
    """Stored GPU row: one GPU over one window."""

    run_id: int | None
    t_start_mono_s: float
    gpu_index: int
    n: int
    util_mean_pct: float | None
    util_min_pct: float | None
    util_max_pct: float | None
    mem_used_max_bytes: int | None
    power_mean_w: float | None
    power_min_w: float | None
    power_max_w: float | None
    energy_j: float | None
    temperature_max_c: float | None
    sm_clock_mhz: float | None
    simulated: bool
    t_wall_s: float | None = None
    """Epoch seconds (UTC) of ``t_start_mono_s``."""


@dataclass(frozen=True)
class HostWindow:
    """Stored host row over one window."""

    run_id: int | None
    t_start_mono_s: float
    n: int
    cpu_mean_pct: float
    cpu_max_core_pct: float
    mem_used_bytes: int
    swap_used_bytes: int
    tree_cpu_pct: float | None
    tree_rss_bytes: int | None
    t_wall_s: float | None = None
    """Epoch seconds (UTC) of ``t_start_mono_s``."""
    cpu_user_pct: float | None = None
    """Mean host user % (nice included) of the window's readings (:class:`HostSample`)."""
    cpu_system_pct: float | None = None
    cpu_iowait_pct: float | None = None


@dataclass(frozen=True)
class Batch:
    """Rows handed to the store together."""

    gpu: tuple[GpuWindow, ...]
    host: tuple[HostWindow, ...]


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _stats(values: list[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    return sum(values) / len(values), min(values), max(values)


@dataclass
class Window:
    """The readings of one window so far, of the runs active when it opened."""

    start_ns: int
    runs: tuple[RunAccumulator, ...]
    gpu: dict[int, list[GpuSample]] = field(default_factory=dict)
    host: list[HostSample] = field(default_factory=list)
    trees: dict[int, list[TreeSample]] = field(default_factory=dict)  # by run id

    def gpu_owner(self, index: int) -> int | None:
        """The run a GPU's row belongs to (the only run, when one runs)."""
        for acc in self.runs:
            if index in acc.gpus:
                return acc.run_id
        return self.runs[0].run_id if len(self.runs) == 1 else None

    def add(self, gpus: tuple[GpuSample, ...], host: HostSample | None,
            trees: dict[int, TreeSample | None]) -> None:
        """One tick's readings (``trees``: each run's process tree, by run id)."""
        for s in gpus:
            self.gpu.setdefault(s.index, []).append(s)
        if host is not None:
            self.host.append(host)
            for run_id, tree in trees.items():
                if tree is not None:
                    self.trees.setdefault(run_id, []).append(tree)

    def rows(self, wall: float) -> tuple[list[GpuWindow], list[HostWindow]]:
        """Its stored rows; ``wall``: epoch seconds of its start."""
        t = self.start_ns / 1e9
        gpu_rows, host_rows = [], []
        for index, ss in sorted(self.gpu.items()):
            um, ulo, uhi = _stats([s.gpu_util_pct for s in ss if s.gpu_util_pct is not None])
            pm, plo, phi = _stats([s.power_w for s in ss if s.power_w is not None])
            mem = [s.mem_used_bytes for s in ss if s.mem_used_bytes is not None]
            temps = [s.temperature_c for s in ss if s.temperature_c is not None]
            sm = [s.sm_clock_mhz for s in ss if s.sm_clock_mhz is not None]
            energy = [s.energy_j for s in ss if s.energy_j is not None]
            gpu_rows.append(GpuWindow(
                self.gpu_owner(index), t, index, len(ss), um, ulo, uhi,
                max(mem) if mem else None, pm, plo, phi, energy[-1] if energy else None,
                max(temps) if temps else None, sm[-1] if sm else None,
                any(s.simulated for s in ss), wall))
        if self.host:
            cores = [sum(h.cpu_pct_per_core) / max(1, len(h.cpu_pct_per_core)) for h in self.host]
            last = self.host[-1]
            # One host row per active run, each with that run's process tree.
            run_ids: list[int | None] = [r.run_id for r in self.runs] or [None]
            for run_id in run_ids:
                trees = self.trees.get(run_id, []) if run_id is not None else []
                host_rows.append(HostWindow(
                    run_id, t, len(self.host), sum(cores) / len(cores),
                    max(max(h.cpu_pct_per_core, default=0.0) for h in self.host),
                    last.mem_used_bytes, last.swap_used_bytes,
                    sum(tr.cpu_pct for tr in trees) / len(trees) if trees else None,
                    max(tr.rss_bytes for tr in trees) if trees else None, wall,
                    _mean([h.cpu_user_pct for h in self.host]),
                    _mean([h.cpu_system_pct for h in self.host]),
                    _mean([h.cpu_iowait_pct for h in self.host])))
        return gpu_rows, host_rows
