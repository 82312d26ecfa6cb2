"""The former pure-Python bootstrap (dltop 0.1 up to issue 32), kept by the tests as the reference.

:mod:`dltop.results.bootstrap` computes the same intervals with numpy and an exact
per-run distribution; the golden tests and ``benchmarks/summary_scale.py`` compare
its intervals with these (equal within Monte-Carlo error). Not used by any table.

A configuration's time is the median over its runs of each run's median
(:mod:`dltop.results.aggregate`). Its confidence interval resamples both
levels that vary: a resample draws the runs with replacement, then each drawn
run's measured iterations with replacement, and recomputes the median of run
medians (a two-level, "hierarchical" bootstrap). With one run this is the
ordinary bootstrap of that run's iterations; with several it also carries the
run-to-run spread, which resampling pooled iterations would hide. The interval
is the 2.5th-97.5th percentile of :data:`RESAMPLES` resamples drawn by a
``random.Random`` seeded with :data:`SEED`, so the same data always gives the
same interval.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

# The per-run statistics and the point estimate did not change: only the resampling did.
from dltop.results.bootstrap import RunStat, Sample, estimate, run_median_s

RESAMPLES = 2000
SEED = 20240611
CONFIDENCE = 0.95


def resamples(runs: Sequence[Sequence[Sample]], stat: RunStat = run_median_s,
              n: int = RESAMPLES, rng: random.Random | None = None) -> list[float]:
    """``n`` two-level bootstrap replicates of :func:`estimate`.

    Raises:
        ValueError: no runs, or a run without iterations.
    """
    runs = [list(r) for r in runs]
    if not runs or any(not r for r in runs):
        raise ValueError("bootstrap needs at least one run, each with iterations")
    rng = rng or random.Random(SEED)
    out = []
    for _ in range(n):
        picked = rng.choices(runs, k=len(runs)) if len(runs) > 1 else runs
        out.append(statistics.median(stat(rng.choices(r, k=len(r))) for r in picked))
    return out


def percentile_interval(values: Sequence[float], confidence: float = CONFIDENCE,
                        ) -> tuple[float, float]:
    """The central ``confidence`` interval of ``values`` (linear interpolation)."""
    ordered = sorted(values)
    tail = (1.0 - confidence) / 2.0

    def at(q: float) -> float:
        pos = q * (len(ordered) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return at(tail), at(1.0 - tail)


def median_ci(runs: Sequence[Sequence[Sample]], stat: RunStat = run_median_s,
              ) -> tuple[float, float]:
    """95 % bootstrap interval of the median over runs of ``stat`` (seeded).

    Raises:
        ValueError: no runs, or a run without iterations.
    """
    return percentile_interval(resamples(runs, stat))


def ratio_ci(a: Sequence[Sequence[Sample]], b: Sequence[Sequence[Sample]],
             stat: RunStat = run_median_s) -> tuple[float, float, float]:
    """B/A of the estimates and its 95 % bootstrap interval (A and B resampled apart).

    Returns:
        (ratio, low, high).

    Raises:
        ValueError: a side without runs or iterations.
    """
    rng = random.Random(SEED)
    ra = resamples(a, stat, rng=rng)
    rb = resamples(b, stat, rng=rng)
    ratios = [y / x for x, y in zip(ra, rb, strict=True) if x > 0]
    low, high = percentile_interval(ratios)
    return estimate(b, stat) / estimate(a, stat), low, high
