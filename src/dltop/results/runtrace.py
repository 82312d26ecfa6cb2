"""One run over time: its iterations and the device readings of its window, on one axis.

The run detail screen (``tui/``) and the report's per-run figure (``report/``) draw
the same thing, s/iter per iteration with warm-up marked, the loss, GPU
utilization/power/memory and host CPU, and a convergence run's evaluations (test
accuracy or perplexity and loss), so both read it here.

All times are seconds since the run's *origin*: the start of its first iteration
(``t_mono_ns`` minus its ``seconds``) or its first telemetry window, whichever is
earlier. Iteration times (``t_mono_ns``, the step's end, from the child's
``time.monotonic``) and telemetry windows (``t_start_mono_s``, the sampler's
``time.monotonic``) come from the same system-wide monotonic clock, so they share
the axis without any correction. Long runs are thinned in SQL to at most
``max_points`` rows per series (every k-th row, the last one kept) so that a run
of a million iterations reads in milliseconds; :attr:`RunTrace.thinned_every`
says so, and a chart must too.

A pruned run (``dltop prune``) has no raw rows left: its measured seconds come
from ``run_archive`` without times (:attr:`RunTrace.pruned` is true, the series
are indexed by iteration, and there is no telemetry).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dltop.store import samples
from dltop.store.read import iterations

if TYPE_CHECKING:
    from dltop.store.reader import Db

DEFAULT_MAX_POINTS = 2000


@dataclass(frozen=True)
class IterPoint:
    """One training step."""

    idx: int
    t_end_s: float | None
    """End of the step on the run's axis; None for a pruned run."""
    seconds: float
    warmup: bool
    loss: float | None
    """None when the runner reported none or a non-finite one (stored as NULL)."""
    samples: int | None


@dataclass(frozen=True)
class GpuPoint:
    """One stored telemetry window of one GPU."""

    t_s: float
    util_pct: float | None
    mem_used_bytes: int | None
    power_w: float | None
    temperature_c: float | None
    sm_clock_mhz: float | None


@dataclass(frozen=True)
class GpuSeries:
    """The windows of one GPU during the run."""

    gpu_index: int
    simulated: bool
    points: tuple[GpuPoint, ...]
    node: str | None = None
    """The node of a Slurm run's GPU (its agent's rows); None: the engine's host."""

    @property
    def label(self) -> str:
        """``gpuN``, or ``node:gpuN`` for another node's GPU."""
        return f"{self.node}:gpu{self.gpu_index}" if self.node else f"gpu{self.gpu_index}"


@dataclass(frozen=True)
class HostPoint:
    """One stored host telemetry window."""

    t_s: float
    cpu_pct: float | None
    """Whole host, % of all logical CPUs."""
    tree_cpu_pct: float | None
    """The run's process tree (100 = one core)."""
    tree_rss_bytes: int | None


@dataclass(frozen=True)
class EvalMark:
    """One evaluation on the test set (convergence runs, ``evals`` rows)."""

    idx: int
    """The last training step before it."""
    t_s: float | None
    """When it ended on the run's axis (the event's arrival when the runner sent no
    time); None for a pruned run."""
    epoch: float | None
    accuracy: float | None
    perplexity: float | None
    loss: float | None
    train_s: float


@dataclass(frozen=True)
class RunTrace:
    """A run's series on one time axis (see the module docstring)."""

    run_id: int
    iterations: tuple[IterPoint, ...]
    gpus: tuple[GpuSeries, ...]
    host: tuple[HostPoint, ...]
    n_iterations: int
    """Rows stored (or archived), before thinning."""
    thinned_every: int
    """1 when every row is here; k when every k-th iteration was kept."""
    pruned: bool
    warmup_end_s: float | None = None
    """Axis time where the measured iterations start (end of the last warm-up step,
    read from every row, thinned or not); None without warm-up or times."""
    evals: tuple[EvalMark, ...] = ()
    """Its evaluations, in order (a few per run: never thinned, kept by a prune)."""

    @property
    def has_loss(self) -> bool:
        """Whether any iteration reported a loss."""
        return any(p.loss is not None for p in self.iterations)

    @property
    def duration_s(self) -> float | None:
        """Axis time of the last point of any series."""
        ends = [p.t_end_s for p in self.iterations[-1:] if p.t_end_s is not None]
        ends += [s.points[-1].t_s for s in self.gpus if s.points]
        ends += [h.t_s for h in self.host[-1:]]
        return max(ends) if ends else None


def read_trace(db: Db, run_id: int, *, max_points: int = DEFAULT_MAX_POINTS) -> RunTrace:
    """The run's iterations and telemetry on one time axis.

    Args:
        db: any dltop database connection (read-only is enough).
        run_id: the run.
        max_points: most rows read per series; longer series are thinned to every
            k-th row (the same k for iterations and telemetry is not needed: each
            series gets its own).

    Returns:
        The trace; empty series when the run stored none.
    """
    n_iter = samples.count(db, "iterations", run_id)
    k = max(1, -(-n_iter // max(1, max_points)))
    its = iterations.thinned(db, run_id, k)
    if not its:
        pruned = _archived(db, run_id, max_points)
        if pruned is not None:
            return replace(pruned, evals=_evals(db, run_id, None))
    n_gpu, n_idx = samples.gpu_count(db, run_id)
    kg = max(1, -(-n_gpu // max(1, n_idx * max_points)))  # per GPU, as iterations
    gpu = samples.gpu_series(db, run_id, every=kg)
    kh = max(1, -(-samples.count(db, samples.HOST, run_id) // max(1, max_points)))
    host = samples.host_series(db, run_id, every=kh)
    starts = [r["t_mono_ns"] / 1e9 - r["seconds"] for r in its[:1] if r["t_mono_ns"]]
    starts += [r["t_start_mono_s"] for r in gpu + host if r["t_start_mono_s"] is not None]
    origin = min(starts) if starts else 0.0
    warm_ns = iterations.warmup_end_ns(db, run_id)
    series: dict[tuple[str, int], list[GpuPoint]] = {}
    simulated: dict[tuple[str, int], bool] = {}
    for r in gpu:
        idx = (r["node"] or "", int(r["gpu_index"]))
        simulated[idx] = simulated.get(idx, False) or bool(r["simulated"])
        series.setdefault(idx, []).append(GpuPoint(
            r["t_start_mono_s"] - origin, r["util_mean_pct"], r["mem_used_max_bytes"],
            r["power_mean_w"], r["temperature_max_c"], r["sm_clock_mhz"]))
    return RunTrace(
        run_id=run_id,
        iterations=tuple(IterPoint(
            int(r["idx"]), r["t_mono_ns"] / 1e9 - origin if r["t_mono_ns"] else None,
            float(r["seconds"]), bool(r["warmup"]), r["loss"], r["samples"])
            for r in its),
        gpus=tuple(GpuSeries(i[1], simulated[i], tuple(p), i[0] or None)
                   for i, p in sorted(series.items())),
        host=tuple(HostPoint(r["t_start_mono_s"] - origin, r["cpu_mean_pct"],
                             r["tree_cpu_pct"], r["tree_rss_bytes"]) for r in host),
        n_iterations=n_iter, thinned_every=k, pruned=False,
        warmup_end_s=warm_ns / 1e9 - origin if warm_ns else None,
        evals=_evals(db, run_id, origin))


def _evals(db: Db, run_id: int, origin: float | None) -> tuple[EvalMark, ...]:
    """The run's evaluations, timed on the axis from ``origin`` (None: untimed)."""
    return tuple(EvalMark(
        int(r["idx"]), r["t_mono_ns"] / 1e9 - origin if r["t_mono_ns"] and origin is not None
        else None, r["epoch"], r["accuracy"], r["perplexity"], r["loss"],
        float(r["train_s"] or 0.0))
        for r in iterations.evals(db, [run_id]).get(run_id, ()))


def _archived(db: Db, run_id: int, max_points: int) -> RunTrace | None:
    measured = iterations.archived(db, run_id)
    if measured is None:
        return None
    k = max(1, -(-len(measured) // max(1, max_points)))
    kept = [i for i in range(len(measured)) if i % k == 0 or i == len(measured) - 1]
    return RunTrace(run_id=run_id,
                    iterations=tuple(IterPoint(i, None, measured[i][0], False, None,
                                               measured[i][1]) for i in kept),
                    gpus=(), host=(), n_iterations=len(measured), thinned_every=k,
                    pruned=True)
