"""What the run panel says of a run beyond its progress: stall, loss trend, campaign ETA.

Pure functions over numbers the live reads fetched, each answering a frozen
value: the viewer draws them, tests check them without a database or a screen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

STALL_MIN_S = 5.0
"""A run is stalled after at least this long without an iteration ..."""
STALL_STEPS = 10
"""... or this many of its median steps, whichever is longer."""
FIRST_ITERATION_S = 120.0
"""Before its first iteration a run imports its framework and builds its model (CNTK and
TensorFlow take tens of seconds): it is stalled only after this long without one."""
FLAT_REL = 0.01
"""A loss trend moving less than this fraction of its level is flat."""


def stall_bound_s(median_step_s: float | None) -> float:
    """Seconds without an iteration after which a run is stalled: max(5 s, 10 x median)."""
    if median_step_s is None:
        return FIRST_ITERATION_S
    return max(STALL_MIN_S, STALL_STEPS * median_step_s)


@dataclass(frozen=True)
class Stall:
    """How long a run has gone without an iteration, and whether that is too long."""

    quiet_s: float
    """Seconds since the run's last iteration (since its start before the first)."""
    bound_s: float
    """The :func:`stall_bound_s` it was held to."""
    first: bool
    """True when no iteration has come yet (the run is still starting)."""

    @property
    def stalled(self) -> bool:
        """True once ``quiet_s`` passed the bound."""
        return self.quiet_s > self.bound_s


def stall(now_s: float, last_iteration_s: float | None, started_s: float | None,
          median_step_s: float | None) -> Stall | None:
    """The run's stall state at ``now_s`` (epoch seconds; None when it cannot be told).

    Args:
        now_s: the viewer's clock, epoch seconds.
        last_iteration_s: epoch seconds at which the newest iteration ended (None before
            the first, or when the runner's rows carry no wall time).
        started_s: epoch seconds at which the run started.
        median_step_s: median seconds per iteration so far (None before the first).
    """
    if last_iteration_s is not None:
        return Stall(max(0.0, now_s - last_iteration_s), stall_bound_s(median_step_s), False)
    if started_s is None or median_step_s is not None:  # iterations without wall times
        return None
    return Stall(max(0.0, now_s - started_s), stall_bound_s(None), True)


@dataclass(frozen=True)
class LossTrend:
    """The newest finite loss and where the recent ones are heading."""

    last: float
    direction: str
    """``falling``, ``rising`` or ``flat`` (``flat`` too with fewer than 4 losses)."""
    change: float
    """Mean of the newer half of the recent losses minus that of the older half."""

    @property
    def arrow(self) -> str:
        """One character for the direction."""
        return {"falling": "↓", "rising": "↑"}.get(self.direction, "→")


def loss_trend(losses: Sequence[float | None]) -> LossTrend | None:
    """The trend of ``losses`` (oldest first; missing and non-finite ones left out).

    The older and newer halves' means are compared, so one noisy step does not
    flip the arrow. None when no loss is finite.
    """
    vals = [v for v in losses if v is not None and math.isfinite(v)]
    if not vals:
        return None
    if len(vals) < 4:
        return LossTrend(vals[-1], "flat", 0.0)
    half = len(vals) // 2
    old, new = statistics.fmean(vals[:half]), statistics.fmean(vals[-half:])
    change = new - old
    scale = max(abs(old), abs(new), 1e-12)
    direction = "flat" if abs(change) < FLAT_REL * scale else (
        "falling" if change < 0 else "rising")
    return LossTrend(vals[-1], direction, change)


@dataclass(frozen=True)
class FinishedRate:
    """Measured pace of the finished runs of one configuration."""

    config: tuple[object, ...]
    """What tells configurations apart for pace (framework, model, batch, device)."""
    runs: int
    iterations: int
    """Iterations of those runs, warm-up included."""
    wall_s: float
    """Their wall time from start to end (start-up and warm-up included)."""
    measured_s: float = 0.0
    """Their measured iterations' seconds (n x mean); the rest of ``wall_s`` is each
    run's fixed cost: start-up, compile, warm-up, teardown. 0: unknown, so the wall
    time is spread over the iterations."""


@dataclass(frozen=True)
class PendingWork:
    """Jobs of one configuration still to run."""

    config: tuple[object, ...]
    jobs: int
    iterations: int
    """Iterations of those jobs, warm-up included."""
    started: bool = False
    """Runs in progress: their start-up is behind them, only their iterations are left."""


@dataclass(frozen=True)
class CampaignEta:
    """Time left for a campaign's queue."""

    seconds: float | None
    """None: no run finished yet, so no pace is known."""
    from_runs: int
    """Finished runs the pace was measured on."""
    jobs_left: int

    def text(self) -> str:
        """``ETA ≈ 12 min (from 5 finished runs)``, ``ETA unknown``, or ``no job left``."""
        if self.jobs_left == 0:
            return "no job left"
        if self.seconds is None:
            return "ETA unknown (no finished run yet)"
        runs = f"{self.from_runs} finished run" + ("s" if self.from_runs != 1 else "")
        return f"ETA ≈ {approx_duration(self.seconds)} (from {runs})"


def approx_duration(seconds: float) -> str:
    """A rough duration: ``40 s``, ``12 min``, ``3 h 20 min``."""
    s = max(0, round(seconds))
    if s < 90:
        return f"{s} s"
    minutes = round(s / 60)
    if minutes < 120:
        return f"{minutes} min"
    h, m = divmod(minutes, 60)
    return f"{h} h {m:02d} min"


def campaign_eta(finished: Sequence[FinishedRate], pending: Sequence[PendingWork],
                 current_left_s: float | None = None) -> CampaignEta:
    """Seconds left: each pending job's fixed cost plus its iterations at the measured pace.

    Finished runs teach both parts: a run's fixed cost (start-up, compile, warm-up,
    teardown: its wall time less its measured iterations) and the seconds per measured
    iteration. A configuration with finished runs is estimated from its own, at least
    the iterations its runs really took (a time window makes runs longer than their
    ``iterations``); the others from all finished runs together. Runs in progress pay
    no start-up again. ``current_left_s`` (the run in progress) is added.
    """
    jobs_left = sum(p.jobs for p in pending) + (1 if current_left_s is not None else 0)
    runs = sum(f.runs for f in finished)
    all_iters = sum(f.iterations for f in finished)
    if not runs or all_iters <= 0:
        return CampaignEta(None, 0, jobs_left)
    overall = _pace(sum(f.wall_s for f in finished), sum(f.measured_s for f in finished),
                    runs, all_iters)
    own = {f.config: _pace(f.wall_s, f.measured_s, f.runs, f.iterations)
           for f in finished if f.iterations > 0}
    left = 0.0
    for p in pending:
        fixed_s, per_iter_s, iters_per_run = own.get(p.config, overall)
        iters = p.iterations
        if p.config in own and not p.started:
            iters = max(iters, round(iters_per_run * p.jobs))
        left += (0.0 if p.started else fixed_s * p.jobs) + iters * per_iter_s
    return CampaignEta(left + (current_left_s or 0.0), runs, jobs_left)


def _pace(wall_s: float, measured_s: float, runs: int,
          iterations: int) -> tuple[float, float, float]:
    """(fixed seconds per run, seconds per iteration, iterations per run) of finished
    runs; without their measured seconds the wall time is spread over the iterations."""
    if 0 < measured_s <= wall_s:
        return (wall_s - measured_s) / runs, measured_s / iterations, iterations / runs
    return 0.0, wall_s / iterations, iterations / runs
