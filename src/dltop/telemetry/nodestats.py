"""A multi-node run's telemetry summary, from the stored windows of every node's agent.

A local run's summary is accumulated reading by reading by the engine's sampler
(:mod:`dltop.telemetry.runstats`). A Slurm run's GPUs are on other hosts: their
readings arrive as the agents' downsampled windows (0.5 s), so its summary is
computed from those windows once the run ended, with the same meaning per
column over every node's GPUs together: the measured window (the end of the last
warm-up iteration, or the first measured step's start, to the last measured
iteration's end, in wall seconds since the nodes' clocks differ), ``power_mean_w``
the summed power of all the run's GPUs, ``energy_j`` their summed energy (each
GPU's counter delta, else its mean power times the window), ``gpu_mem_peak_bytes``
the largest of any one GPU, utilization the mean over all GPUs' windows. A window
counts when it starts inside the measured window (its 0.5 s resolution is the
summary's). Pure: the store reads the rows and writes the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dltop.telemetry.runstats import NO_WINDOW
from dltop.telemetry.values import RunTelemetry

NO_SAMPLES = "no agent sample inside the measured window"


@dataclass(frozen=True)
class NodeGpuRow:
    """One stored GPU window of one node (the columns a summary needs)."""

    node: str
    gpu_index: int
    t_wall_s: float
    n: int
    util_mean_pct: float | None
    util_max_pct: float | None
    mem_used_max_bytes: int | None
    power_mean_w: float | None
    energy_j: float | None
    simulated: bool


@dataclass(frozen=True)
class NodeHostRow:
    """One stored host window of one node."""

    node: str
    t_wall_s: float
    n: int
    cpu_mean_pct: float | None
    cpu_user_pct: float | None
    cpu_system_pct: float | None
    cpu_iowait_pct: float | None


def _wmean(pairs: Sequence[tuple[float | None, int]]) -> float | None:
    known = [(v, n) for v, n in pairs if v is not None and n > 0]
    total = sum(n for _, n in known)
    return sum(v * n for v, n in known) / total if total else None


def _energy(rows: Sequence[NodeGpuRow], window_s: float) -> tuple[float | None, str | None]:
    """Summed energy of every GPU: counter deltas scaled to the window, else mean power."""
    by_gpu: dict[tuple[str, int], list[NodeGpuRow]] = {}
    for r in rows:
        by_gpu.setdefault((r.node, r.gpu_index), []).append(r)
    counters: list[float] = []
    for rs in by_gpu.values():
        e = [(r.t_wall_s, r.energy_j) for r in rs if r.energy_j is not None]
        span = e[-1][0] - e[0][0] if len(e) > 1 else 0.0
        delta = e[-1][1] - e[0][1] if len(e) > 1 else -1.0
        if span <= 0 or delta < 0:  # one window, or a counter reset: use the power
            break
        counters.append(delta * window_s / span)
    if counters and len(counters) == len(by_gpu):
        return sum(counters), "counter"
    powers = [_wmean([(r.power_mean_w, r.n) for r in rs]) for rs in by_gpu.values()]
    if powers and all(p is not None for p in powers):
        return sum(p for p in powers if p is not None) * window_s, "mean_power"
    return None, None


def measured_window(iterations: Sequence[tuple[float | None, float, bool]],
                    ) -> tuple[float, float] | None:
    """(start, end) wall seconds of the measured window from (t_wall_s, seconds, warmup).

    None when no measured iteration has a wall time.
    """
    warm = [t for t, _, w in iterations if w and t is not None]
    measured = [(t, s) for t, s, w in iterations if not w and t is not None]
    if not measured:
        return None
    end = max(t for t, _ in measured)
    start = max(warm) if warm else min(t - s for t, s in measured)
    return (start, end) if end > start else None


def summarize(gpu: Sequence[NodeGpuRow], host: Sequence[NodeHostRow],
              window: tuple[float, float] | None, samples: int | None) -> RunTelemetry:
    """The run's summary over ``window`` (wall seconds) from every node's windows.

    Args:
        gpu: the run's GPU windows, any node, in time order.
        host: the run's host windows, any node, in time order.
        window: the measured window (:func:`measured_window`), None without one.
        samples: training samples of the measured iterations (joules per sample).
    """
    simulated = any(r.simulated for r in gpu)
    if window is None:
        return RunTelemetry(telemetry_note=NO_WINDOW, telemetry_simulated=simulated)
    start, end = window
    window_s = end - start
    g = [r for r in gpu if start <= r.t_wall_s <= end]
    h = [r for r in host if start <= r.t_wall_s <= end]
    if not g and not h:
        return RunTelemetry(window_s=window_s, telemetry_note=NO_SAMPLES,
                            telemetry_simulated=simulated)
    n_gpus = len({(r.node, r.gpu_index) for r in g})
    power = _wmean([(r.power_mean_w, r.n) for r in g])
    energy, source = _energy(g, window_s) if g else (None, None)
    utils = [r.util_max_pct for r in g if r.util_max_pct is not None]
    mems = [r.mem_used_max_bytes for r in g if r.mem_used_max_bytes is not None]
    return RunTelemetry(
        gpu_util_mean_pct=_wmean([(r.util_mean_pct, r.n) for r in g]),
        gpu_util_peak_pct=max(utils) if utils else None,
        gpu_mem_peak_bytes=max(mems) if mems else None,
        power_mean_w=power * n_gpus if power is not None else None,
        energy_j=energy, energy_source=source,
        joules_per_sample=energy / samples if energy is not None and samples else None,
        host_cpu_mean_pct=_wmean([(r.cpu_mean_pct, r.n) for r in h]),
        host_cpu_user_pct=_wmean([(r.cpu_user_pct, r.n) for r in h]),
        host_cpu_system_pct=_wmean([(r.cpu_system_pct, r.n) for r in h]),
        host_cpu_iowait_pct=_wmean([(r.cpu_iowait_pct, r.n) for r in h]),
        window_s=window_s, telemetry_simulated=simulated,
        gpu_samples=sum(r.n for r in g), host_samples=sum(r.n for r in h),
        gpu_readings=min(_per_gpu(g).values()) if g else None,
        # the run's host figures are the nodes' together: the fewest of any node's
        host_readings=min(_per_node(h).values()) if h else 0)


def _per_gpu(rows: Sequence[NodeGpuRow]) -> dict[tuple[str, int], int]:
    """Readings of each (node, GPU) over ``rows`` (each window says how many it holds)."""
    out: dict[tuple[str, int], int] = {}
    for r in rows:
        out[(r.node, r.gpu_index)] = out.get((r.node, r.gpu_index), 0) + r.n
    return out


def _per_node(rows: Sequence[NodeHostRow]) -> dict[str, int]:
    """Host readings of each node over ``rows``."""
    out: dict[str, int] = {}
    for r in rows:
        out[r.node] = out.get(r.node, 0) + r.n
    return out
