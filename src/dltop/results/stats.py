"""Per-run statistics of seconds per iteration (warm-up already excluded).

Percentiles use linear interpolation between closest ranks (NumPy's default
``linear`` method): for sorted x of length n, the q-quantile sits at position
``q * (n - 1)``, which is ``statistics.quantiles(method="inclusive")``. The
coefficient of variation is the sample standard deviation (n - 1) over the mean.
"""

from __future__ import annotations

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


def p10_p90(values: Sequence[float]) -> tuple[float, float]:
    """The 10th and 90th percentiles (linear interpolation) of one or more values.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("percentiles of no values")
    if len(values) == 1:  # statistics.quantiles wants two points; one is its own percentile
        return values[0], values[0]
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return deciles[0], deciles[-1]


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
    median = statistics.median(seconds)
    mean = statistics.fmean(seconds)
    cv = statistics.stdev(seconds) / mean if n > 1 and mean > 0 else 0.0
    p10, p90 = p10_p90(seconds)
    return RunStats(
        n_iterations=n, median_s=median, mean_s=mean, p10_s=p10, p90_s=p90, cv=cv,
        # samples/s has one definition everywhere (docs/metrics.md): total samples over
        # total measured seconds, which for a fixed batch is samples per iteration over
        # the *mean* iteration; batch / median would disagree with every export
        samples_per_s=samples_per_iter / mean if mean > 0 else None,
        noisy=cv > noisy_cv,
    )
