"""Seeded bootstrap confidence intervals for a configuration's median and for ratios.

A configuration's time is the median over its runs of each run's median
(:mod:`dltop.results.aggregate`). Its confidence interval resamples both
levels that vary: a resample draws the runs with replacement, then each drawn
run's measured iterations with replacement, and recomputes the median of run
medians (a two-level, "hierarchical" bootstrap). With one run this is the
ordinary bootstrap of that run's iterations; with several it also carries the
run-to-run spread, which resampling pooled iterations would hide. The interval
is the 2.5th-97.5th percentile (linear interpolation) of the resampled values.

How it is computed (issue 32; :mod:`dltop.results.bootstrap_ref` keeps the former
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
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

RESAMPLES = 2000
SEED = 20240611
CONFIDENCE = 0.95
EXACT_MAX_ITERATIONS = 400
"""Runs with more measured iterations are resampled (the exact distribution costs n²)."""
BATCH = 1000
"""One-run configurations whose intervals :func:`median_cis` computes in one array."""
CHUNK = 1 << 22
"""Elements of one array of resampled iterations (32 MiB of float64)."""

Sample = tuple[float, int]
"""One measured iteration: (seconds, samples)."""
RunStat = Callable[[Sequence[Sample]], float]
Floats = npt.NDArray[np.float64]


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
def _pair_probabilities(n: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], Floats]:
    """``(i, j, p)``: the median of a size-``n`` resample with replacement of ``n``
    sorted values is ``(x[i] + x[j]) / 2`` with probability ``p`` (``i == j`` for odd n).

    With C(a) ~ Binomial(n, a/n) the draws among the a smallest, the k-th smallest
    of the resample is ≤ x[a-1] iff C(a) ≥ k. For even n the middle pair's joint
    CDF is F(a, b) = P(C(a) ≥ k) - P(C(a) = k, C(b) = k) for b ≥ a (k draws among
    the a smallest, none between a and b) and P(C(b) ≥ k + 1) for b < a.
    """
    a = np.arange(n + 1, dtype=np.float64)
    p = a / n
    c = np.arange(n + 1)
    log_comb = np.array([math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1)
                         for x in range(n + 1)])
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0; 0 * log 0 masked below
        log_p, log_q = np.log(p), np.log1p(-p)
        # pmf[a, c] = P(C(a) = c); 0 * log 0 is 0 (an empty or certain count)
        pmf = np.exp(log_comb + np.where(c == 0, 0.0, c * log_p[:, None])
                     + np.where(c == n, 0.0, (n - c) * log_q[:, None]))
    tail = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]  # tail[a, k] = P(C(a) >= k)
    if n % 2:
        k = (n + 1) // 2
        prob = np.diff(tail[:, k])
        idx = np.arange(n)
        return idx, idx, np.clip(prob, 0.0, None)
    k = n // 2
    both = np.exp(log_comb[k] + k * log_p[:, None] + (n - k) * log_q[None, :])
    upper = tail[:, k][:, None] - both  # b >= a
    lower = np.broadcast_to(tail[:, k + 1][None, :], (n + 1, n + 1))  # b < a
    cdf = np.where(c[None, :] >= c[:, None], upper, lower)
    prob = np.diff(np.diff(cdf, axis=0), axis=1)
    i, j = np.nonzero(np.triu(prob > 0))
    return i, j, np.clip(prob[i, j], 0.0, None)


def median_distribution(seconds: Sequence[float]) -> tuple[Floats, Floats]:
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
    x = np.sort(np.asarray(seconds, dtype=np.float64))
    i, j, p = _pair_probabilities(n)
    values = (x[i] + x[j]) / 2.0
    order = np.argsort(values, kind="stable")
    return values[order], np.cumsum(p[order])


class _Run:
    """One run's iterations as arrays, with its median's distribution when exact."""

    def __init__(self, items: Sequence[Sample], stat: RunStat) -> None:
        self.seconds = np.fromiter((s for s, _ in items), np.float64, len(items))
        self.samples = np.fromiter((n for _, n in items), np.float64, len(items))
        self.items = items
        self.stat = stat
        self.dist = (median_distribution(self.seconds.tolist())
                     if stat is run_median_s and len(items) <= EXACT_MAX_ITERATIONS else None)

    def draw(self, m: int, rng: np.random.Generator) -> Floats:
        """``m`` values of the run's statistic over resamples of its iterations."""
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


def _runs(runs: Sequence[Sequence[Sample]], stat: RunStat) -> list[_Run]:
    if not runs or any(not r for r in runs):
        raise ValueError("bootstrap needs at least one run, each with iterations")
    if any(not math.isfinite(s) for r in runs for s, _ in r):
        raise ValueError("bootstrap needs finite iteration times")
    return [_Run(r, stat) for r in runs]


def resamples(runs: Sequence[Sequence[Sample]], stat: RunStat = run_median_s,
              n: int = RESAMPLES, rng: np.random.Generator | None = None) -> Floats:
    """``n`` two-level bootstrap replicates of :func:`estimate`.

    Raises:
        ValueError: no runs, a run without iterations, or a non-finite time.
    """
    return _replicates(_runs(runs, stat), n, rng or np.random.default_rng(SEED))


def _replicates(runs: list[_Run], n: int, rng: np.random.Generator) -> Floats:
    if len(runs) == 1:
        return runs[0].draw(n, rng)
    picks = rng.integers(0, len(runs), size=(n, len(runs)))
    drawn = np.empty(picks.shape)
    for r, run in enumerate(runs):  # every slot that drew run r, at once
        slots = picks == r
        count = int(slots.sum())
        if count:
            drawn[slots] = run.draw(count, rng)
    return np.median(drawn, axis=1)


def percentile_interval(values: Sequence[float] | Floats, confidence: float = CONFIDENCE,
                        ) -> tuple[float, float]:
    """The central ``confidence`` interval of ``values`` (linear interpolation)."""
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.asarray(values, dtype=np.float64), [tail, 1.0 - tail])
    return float(low), float(high)


def median_ci(runs: Sequence[Sequence[Sample]], stat: RunStat = run_median_s,
              ) -> tuple[float, float]:
    """95 % bootstrap interval of the median over runs of ``stat`` (exact or seeded).

    Raises:
        ValueError: no runs, a run without iterations, or a non-finite time.
    """
    prepared = _runs(runs, stat)
    if len(prepared) == 1 and prepared[0].dist is not None:
        values, cdf = prepared[0].dist
        tail = (1.0 - CONFIDENCE) / 2.0
        at = np.searchsorted(cdf, np.array([tail, 1.0 - tail]) * cdf[-1], side="left")
        low, high = values[np.minimum(at, len(values) - 1)]
        return float(low), float(high)
    return percentile_interval(_replicates(prepared, RESAMPLES, np.random.default_rng(SEED)))


def median_cis(configs: Sequence[Sequence[Sequence[Sample]]]) -> list[tuple[float, float]]:
    """:func:`median_ci` of each configuration (a table's worth at once).

    One-run configurations of equal length share their arrays: their exact
    distributions are computed and searched together, ``BATCH`` rows at a time.

    Raises:
        ValueError: as :func:`median_ci`, for the first configuration it refuses.
    """
    out: list[tuple[float, float] | None] = [None] * len(configs)
    by_n: dict[int, list[int]] = {}
    for k, runs in enumerate(configs):
        n = len(runs[0]) if len(runs) == 1 else 0
        if 0 < n <= EXACT_MAX_ITERATIONS and all(math.isfinite(s) for s, _ in runs[0]):
            by_n.setdefault(n, []).append(k)
        else:
            out[k] = median_ci(runs)
    tail = (1.0 - CONFIDENCE) / 2.0
    for n, ks in by_n.items():
        i, j, p = _pair_probabilities(n)
        for start in range(0, len(ks), BATCH):
            part = ks[start:start + BATCH]
            x = np.sort(np.array([[s for s, _ in configs[k][0]] for k in part]), axis=1)
            values = (x[:, i] + x[:, j]) / 2.0
            order = np.argsort(values, axis=1, kind="stable")
            values = np.take_along_axis(values, order, axis=1)
            cdf = np.cumsum(p[order], axis=1)
            last = values.shape[1] - 1
            # the first value whose cumulative probability reaches q: searchsorted, by row
            lows = np.minimum((cdf < tail * cdf[:, -1:]).sum(axis=1), last)
            highs = np.minimum((cdf < (1.0 - tail) * cdf[:, -1:]).sum(axis=1), last)
            rows = np.arange(len(part))
            for k, low, high in zip(part, values[rows, lows].tolist(),
                                    values[rows, highs].tolist(), strict=True):
                out[k] = (low, high)
    return [interval for interval in out if interval is not None]


def ratio_ci(a: Sequence[Sequence[Sample]], b: Sequence[Sequence[Sample]],
             stat: RunStat = run_median_s) -> tuple[float, float, float]:
    """B/A of the estimates and its 95 % bootstrap interval (A and B resampled apart).

    Returns:
        (ratio, low, high).

    Raises:
        ValueError: a side without runs or iterations, or a non-finite time.
    """
    rng = np.random.default_rng(SEED)
    ra = resamples(a, stat, rng=rng)
    rb = resamples(b, stat, rng=rng)
    keep = ra > 0
    low, high = percentile_interval(rb[keep] / ra[keep])
    return estimate(b, stat) / estimate(a, stat), low, high
