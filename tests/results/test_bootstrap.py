"""The seeded two-level bootstrap behind the summary's CI and ``dltop compare``."""

from __future__ import annotations

import random

import pytest

from dltop.results import bootstrap


def runs(n_runs: int, n_iters: int, centre: float = 0.1, seed: int = 1,
         ) -> list[list[tuple[float, int]]]:
    rng = random.Random(seed)
    return [[(rng.gauss(centre, centre * 0.1), 8) for _ in range(n_iters)]
            for _ in range(n_runs)]


def test_interval_contains_the_median_and_is_deterministic() -> None:
    data = runs(3, 50)
    low, high = bootstrap.median_ci(data)
    assert low < bootstrap.estimate(data) < high
    assert bootstrap.median_ci(data) == (low, high)  # same seed, same interval


def test_one_run_bootstraps_its_iterations() -> None:
    data = runs(1, 40)
    low, high = bootstrap.median_ci(data)
    seconds = sorted(s for s, _ in data[0])
    assert seconds[0] <= low < bootstrap.estimate(data) < high <= seconds[-1]


def test_interval_narrows_with_more_data() -> None:
    few = bootstrap.median_ci(runs(1, 20))
    many = bootstrap.median_ci(runs(1, 500))
    assert many[1] - many[0] < (few[1] - few[0]) / 2


def test_run_to_run_spread_widens_the_interval() -> None:
    # two runs far apart: the interval spans both, not one run's tight iterations
    data = [[(0.2, 8)] * 10, [(0.4, 8)] * 10]
    assert bootstrap.median_ci(data) == pytest.approx((0.2, 0.4))


def test_throughput_statistic_is_total_over_total() -> None:
    assert bootstrap.run_samples_per_s([(0.1, 8), (0.3, 4)]) == pytest.approx(12 / 0.4)


def test_ratio_interval() -> None:
    a, b = runs(2, 60, 0.1, seed=2), runs(2, 60, 0.2, seed=3)
    ratio, low, high = bootstrap.ratio_ci(a, b)
    assert low < ratio < high and low > 1.6 and high < 2.4
    assert bootstrap.ratio_ci(a, b) == (ratio, low, high)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        bootstrap.median_ci([])
    with pytest.raises(ValueError, match="each with iterations"):
        bootstrap.median_ci([[(0.1, 8)], []])
