"""Seeded bootstrap confidence intervals for a configuration's median and for ratios.

A configuration's time is the median over its runs of each run's median
(:mod:`dltop.results.aggregate`). Its confidence interval resamples both
levels that vary: a resample draws the runs with replacement, then each drawn
run's measured iterations with replacement, and recomputes the median of run
medians (a two-level, "hierarchical" bootstrap). With one run this is the
ordinary bootstrap of that run's iterations; with several it also carries the
run-to-run spread, which resampling pooled iterations would hide. The interval
is the 2.5th-97.5th percentile (linear interpolation) of the resampled values.

How it is computed (issue 32; tests/results/bootstrap_ref.py keeps the former
pure-Python loop, 2 000 resamples of every iteration, as the reference):

- The median of a resample of one run's ``n`` iterations has an exact
  distribution: the resample's k-th smallest is at most the i-th smallest
  iteration exactly when at least k of its n draws fall among the first i, a
  binomial count (two such counts, a multinomial, for the two middle values of
  an even ``n``). :func:`median_distribution` computes it (``n`` ≤
  :data:`EXACT_MAX_ITERATIONS`); its probabilities depend on ``n`` only and are
  computed once per ``n``.
- One run: the interval is that distribution's 2.5 % and 97.5 % quantiles, the
  limit of the resampling interval as the resamples grow: no Monte-Carlo error.
- Several runs, throughput, ratios, or runs longer than
  :data:`EXACT_MAX_ITERATIONS`: :data:`RESAMPLES` two-level resamples drawn by
  numpy's ``default_rng(SEED)`` (each configuration from the same seed, so its
  interval depends on its data only and exports are reproducible), each drawn
  run's median taken from its exact distribution (one uniform number instead
  of ``n`` draws and a sort) or, for the rest, from its resampled iterations.

A table's intervals are computed together by
:func:`dltop.results.bootstrap_batch.median_cis`, equal to these one at a time.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from dltop.results.measured import seconds_of

if TYPE_CHECKING:  # numpy is imported where resampling runs: ~0.1 s a quick command skips
    import numpy as np
    import numpy.typing as npt

RESAMPLES = 2000
SEED = 20240611
CONFIDENCE = 0.95
EXACT_MAX_ITERATIONS = 400
"""Runs with more measured iterations are resampled (the exact distribution costs n²)."""
CHUNK = 1 << 22
"""Elements of one array of resampled iterations or of medians searched (32 MiB of
float64)."""

Sample = tuple[float, int]
"""One measured iteration: (seconds, samples)."""
RunStat = Callable[[Sequence[Sample]], float]
Floats: TypeAlias = "npt.NDArray[np.float64]"


def run_median_s(items: Sequence[Sample]) -> float:
    """A run's median seconds per iteration."""
    return statistics.median(s for s, _ in items)


def run_samples_per_s(items: Sequence[Sample]) -> float:
    """A run's total samples over total seconds."""
    seconds = sum(s for s, _ in items)
    return sum(n for _, n in items) / seconds if seconds > 0 else 0.0


STATS: dict[str, RunStat] = {"time": run_median_s, "throughput": run_samples_per_s}
"""The per-run statistic behind each metric that can be bootstrapped."""


def estimate(runs: Sequence[Sequence[Sample]], stat: RunStat = run_median_s) -> float:
    """The point estimate: median over runs of ``stat`` of each run."""
    return statistics.median(stat(r) for r in runs)


@functools.lru_cache(maxsize=64)
def _pair_probabilities(n: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
    """``(i, j, p)``: the median of a size-``n`` resample with replacement of ``n``
    sorted values is ``(x[i] + x[j]) / 2`` with probability ``p`` (``i == j`` for odd n).

    With C(a) ~ Binomial(n, a/n) the draws among the a smallest, the k-th smallest
    of the resample is ≤ x[a-1] iff C(a) ≥ k. For even n the middle pair's joint
    CDF is F(a, b) = P(C(a) ≥ k) - P(C(a) = k, C(b) = k) for b ≥ a (k draws among
    the a smallest, none between a and b) and P(C(b) ≥ k + 1) for b < a. Plain
    Python (n² terms once per n): a small table's intervals need no numpy.
    """
    comb = [float(math.comb(n, c)) for c in range(n + 1)]  # ≤ 2**400: a float holds it
    ps = [a / n for a in range(n + 1)]

    def tails(k: int) -> list[float]:
        """P(C(a) ≥ k) for a = 0..n."""
        return [math.fsum(comb[c] * p ** c * (1.0 - p) ** (n - c) for c in range(k, n + 1))
                for p in ps]

    if n % 2:
        tail = tails((n + 1) // 2)
        idx = tuple(range(n))
        return idx, idx, tuple(max(tail[a + 1] - tail[a], 0.0) for a in range(n))
    k = n // 2
    tail_k, tail_k1 = tails(k), tails(k + 1)

    def cdf(a: int, b: int) -> float:
        if b < a:
            return tail_k1[b]
        return tail_k[a] - comb[k] * ps[a] ** k * (1.0 - ps[b]) ** (n - k)

    grid = [[cdf(a, b) for b in range(n + 1)] for a in range(n + 1)]
    i_s, j_s, p_s = [], [], []
    for i in range(1, n + 1):
        for j in range(i, n + 1):
            i_s.append(i - 1)
            j_s.append(j - 1)
            p_s.append(max(grid[i][j] - grid[i - 1][j] - grid[i][j - 1] + grid[i - 1][j - 1],
                           0.0))
    return tuple(i_s), tuple(j_s), tuple(p_s)


@functools.lru_cache(maxsize=64)
def _pair_arrays(n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], Floats]:
    """:func:`_pair_probabilities` as numpy arrays."""
    import numpy as np

    i_s, j_s, p_s = _pair_probabilities(n)
    return np.array(i_s, dtype=np.intp), np.array(j_s, dtype=np.intp), np.array(p_s)


def median_distribution(seconds: Sequence[float]) -> tuple[list[float], list[float]]:
    """The exact bootstrap distribution of the median of one run's iterations.

    Returns:
        (values ascending, cumulative probability of each): the medians a resample
        can have and P(median ≤ value).

    Raises:
        ValueError: no values, or more than :data:`EXACT_MAX_ITERATIONS`.
    """
    n = len(seconds)
    if not 0 < n <= EXACT_MAX_ITERATIONS:
        raise ValueError(f"exact distribution of 1 to {EXACT_MAX_ITERATIONS} values, not {n}")
    x = sorted(seconds)
    i_s, j_s, p_s = _pair_probabilities(n)
    values = [(x[i] + x[j]) / 2.0 for i, j in zip(i_s, j_s, strict=True)]
    order = sorted(range(len(values)), key=values.__getitem__)  # stable, as numpy's
    return [values[o] for o in order], list(itertools.accumulate(p_s[o] for o in order))


def _exact_interval(seconds: Sequence[float]) -> tuple[float, float]:
    """The 2.5 % and 97.5 % quantiles of :func:`median_distribution` (no numpy)."""
    values, cdf = median_distribution(seconds)
    tail = (1.0 - CONFIDENCE) / 2.0
    last = len(values) - 1
    return (values[min(bisect.bisect_left(cdf, tail * cdf[-1]), last)],
            values[min(bisect.bisect_left(cdf, (1.0 - tail) * cdf[-1]), last)])


class _Run:
    """One run's iterations as arrays, with its median's distribution when exact."""

    def __init__(self, items: Sequence[Sample], stat: RunStat) -> None:
        import numpy as np  # only where resampling is needed: quick commands load none

        self.seconds = np.fromiter((s for s, _ in items), np.float64, len(items))
        self.samples = np.fromiter((n for _, n in items), np.float64, len(items))
        self.items = items
        self.stat = stat
        self.dist = None
        if stat is run_median_s and len(items) <= EXACT_MAX_ITERATIONS:
            # median_distribution with arrays: a 400-iteration run has 80 200 pairs
            i, j, p = _pair_arrays(len(items))
            x = np.sort(self.seconds)
            values = (x[i] + x[j]) / 2.0
            order = np.argsort(values, kind="stable")
            self.dist = (values[order], np.cumsum(p[order]))

    def draw(self, m: int, rng: np.random.Generator) -> Floats:
        """``m`` values of the run's statistic over resamples of its iterations."""
        import numpy as np

        if self.dist is not None:
            values, cdf = self.dist
            at = np.searchsorted(cdf, rng.random(m) * cdf[-1], side="right")
            picked: Floats = values[np.minimum(at, len(values) - 1)]
            return picked
        n = len(self.seconds)
        out = np.empty(m)
        step = max(1, CHUNK // n)
        for start in range(0, m, step):
            idx = rng.integers(0, n, size=(min(step, m - start), n))
            if self.stat is run_median_s:
                got = np.median(self.seconds[idx], axis=1)
            elif self.stat is run_samples_per_s:
                secs = self.seconds[idx].sum(axis=1)
                got = np.divide(self.samples[idx].sum(axis=1), secs,
                                out=np.zeros(len(secs)), where=secs > 0)
            else:  # any other statistic: its own code on each resample
                got = np.array([self.stat([self.items[i] for i in row]) for row in idx])
            out[start:start + len(got)] = got
        return out


def _checked_seconds(runs: Sequence[Sequence[Sample]]) -> list[list[float]]:
    """Each run's seconds per iteration; the errors of :func:`median_ci`."""
    if not runs or any(not r for r in runs):
        raise ValueError("bootstrap needs at least one run, each with iterations")
    # a run read from the database holds its seconds as an array: copied at once
    seconds = [list(seconds_of(r)) for r in runs]
    if not all(map(math.isfinite, itertools.chain.from_iterable(seconds))):
        raise ValueError("bootstrap needs finite iteration times")
    return seconds


def _rng() -> np.random.Generator:
    import numpy as np

    return np.random.default_rng(SEED)


def resamples(runs: Sequence[Sequence[Sample]], stat: RunStat = run_median_s,
              n: int = RESAMPLES, rng: np.random.Generator | None = None) -> Floats:
    """``n`` two-level bootstrap replicates of :func:`estimate`.

    Raises:
        ValueError: no runs, a run without iterations, or a non-finite time.
    """
    _checked_seconds(runs)
    return _replicates([_Run(r, stat) for r in runs], n, rng or _rng())


def _replicates(runs: list[_Run], n: int, rng: np.random.Generator) -> Floats:
    import numpy as np

    if len(runs) == 1:
        return runs[0].draw(n, rng)
    picks = rng.integers(0, len(runs), size=(n, len(runs)))
    drawn = np.empty(picks.shape)
    for r, run in enumerate(runs):  # every slot that drew run r, at once
        slots = picks == r
        count = int(slots.sum())
        if count:
            drawn[slots] = run.draw(count, rng)
    median: Floats = np.median(drawn, axis=1)
    return median


def percentile_interval(values: Sequence[float] | Floats, confidence: float = CONFIDENCE,
                        ) -> tuple[float, float]:
    """The central ``confidence`` interval of ``values`` (linear interpolation)."""
    import numpy as np

    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.asarray(values, dtype=np.float64), [tail, 1.0 - tail])
    return float(low), float(high)


def median_ci(runs: Sequence[Sequence[Sample]]) -> tuple[float, float]:
    """95 % bootstrap interval of the median over runs of each run's median (exact or
    seeded).

    Raises:
        ValueError: no runs, a run without iterations, or a non-finite time.
    """
    _checked_seconds(runs)
    if len(runs) == 1 and len(runs[0]) <= EXACT_MAX_ITERATIONS:
        return _exact_interval([s for s, _ in runs[0]])
    return percentile_interval(_replicates([_Run(r, run_median_s) for r in runs], RESAMPLES,
                                           _rng()))


def ratio_ci(a: Sequence[Sequence[Sample]], b: Sequence[Sequence[Sample]],
             stat: RunStat = run_median_s) -> tuple[float, float, float]:
    """B/A of the estimates and its 95 % bootstrap interval (A and B resampled apart).

    Returns:
        (ratio, low, high).

    Raises:
        ValueError: a side without runs or iterations, or a non-finite time.
    """
    rng = _rng()
    ra = resamples(a, stat, rng=rng)
    rb = resamples(b, stat, rng=rng)
    keep = ra > 0
    low, high = percentile_interval(rb[keep] / ra[keep])
    return estimate(b, stat) / estimate(a, stat), low, high
