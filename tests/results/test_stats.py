"""Per-run statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from dltop.results.stats import NOISY_CV, p10_p90, summarize_run


def test_odd_count() -> None:
    s = summarize_run([0.3, 0.1, 0.2], samples_per_iter=10)
    assert s.n_iterations == 3
    assert s.median_s == pytest.approx(0.2)
    assert s.mean_s == pytest.approx(0.2)
    assert s.p10_s == pytest.approx(0.12)  # position 0.2 between 0.1 and 0.2
    assert s.p90_s == pytest.approx(0.28)
    assert s.cv == pytest.approx(0.1 / 0.2)  # sample stdev 0.1
    assert s.samples_per_s == pytest.approx(50.0)
    assert s.noisy is True


def test_even_count_median_and_quiet_run() -> None:
    s = summarize_run([1.0, 1.02, 0.98, 1.0], samples_per_iter=4)
    assert s.median_s == pytest.approx(1.0)
    assert s.cv is not None and s.cv < NOISY_CV
    assert s.noisy is False
    assert s.to_columns()["noisy"] == 0


def test_single_and_empty() -> None:
    one = summarize_run([0.5], samples_per_iter=2)
    assert (one.median_s, one.p10_s, one.p90_s, one.cv) == (0.5, 0.5, 0.5, 0.0)
    none = summarize_run([], samples_per_iter=2)
    assert none.n_iterations == 0 and none.median_s is None and none.noisy is False


def test_percentiles_are_linear_interpolation_between_ranks() -> None:
    assert p10_p90([float(i) for i in range(11)]) == pytest.approx((1.0, 9.0))
    # positions 0.3 and 2.7 of the sorted values; the "exclusive" method would give 0.5 and 4.5
    assert p10_p90([4.0, 2.0, 1.0, 3.0]) == pytest.approx((1.3, 3.7))
    with pytest.raises(ValueError):
        p10_p90([])


def test_custom_threshold() -> None:
    xs = [1.0, 1.1, 0.9]
    cv = summarize_run(xs, 1).cv
    assert cv is not None and math.isfinite(cv)
    assert summarize_run(xs, 1, noisy_cv=cv + 0.01).noisy is False
    assert summarize_run(xs, 1, noisy_cv=cv - 0.01).noisy is True
