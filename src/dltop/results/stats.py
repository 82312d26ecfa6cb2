"""Per-run statistics of seconds per iteration (warm-up already excluded).

Percentiles use linear interpolation between closest ranks (NumPy's default
``linear`` method): for sorted x of length n, the q-quantile sits at position
``q * (n - 1)``. The coefficient of variation is the sample standard deviation
(n - 1) over the mean.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

NOISY_CV = 0.10
"""A run whose coefficient of variation exceeds this is flagged noisy."""


@dataclass(frozen=True)
class RunStats:
    """Summary of one run's measured iterations; field names match ``runs`` columns."""

    n_iterations: int
    median_s: float | None
    mean_s: float | None
    p10_s: float | None
    p90_s: float | None
    cv: float | None
    samples_per_s: float | None
    noisy: bool

    def to_columns(self) -> dict[str, Any]:
        """The ``runs`` columns (``noisy`` as 0/1)."""
        d = asdict(self)
        d["noisy"] = int(self.noisy)
        return d


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated ``q``-quantile (0 <= q <= 1) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize_run(seconds: Sequence[float], samples_per_iter: int,
                  noisy_cv: float = NOISY_CV) -> RunStats:
    """Summarise measured iteration times.

    Args:
        seconds: seconds per measured iteration, warm-up excluded.
        samples_per_iter: samples one iteration processes (all devices).
        noisy_cv: threshold above which the run is flagged noisy.
    """
    n = len(seconds)
    if n == 0:
        return RunStats(0, None, None, None, None, None, None, False)
    xs = sorted(seconds)
    median = statistics.median(xs)
    mean = statistics.fmean(xs)
    cv = statistics.stdev(xs) / mean if n > 1 and mean > 0 else 0.0
    return RunStats(
        n_iterations=n, median_s=median, mean_s=mean, p10_s=percentile(xs, 0.10),
        p90_s=percentile(xs, 0.90), cv=cv,
        samples_per_s=samples_per_iter / median if median > 0 else None,
        noisy=cv > noisy_cv,
    )
