"""The seeded two-level bootstrap behind the summary's CI and ``dltop compare``."""

from __future__ import annotations

import itertools
import random
import sqlite3
import statistics
from collections import Counter
from pathlib import Path

import pytest
import sqlite_utils

from dltop.results import bootstrap, bootstrap_batch
from dltop.results.aggregate import config_results
from dltop.store.views import ensure_views

from . import bootstrap_ref


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


def test_bad_times_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        bootstrap.median_ci([[(0.1, 8), (float("nan"), 8)]])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_exact_median_distribution_is_every_resample_counted(n: int) -> None:
    # all n**n equally likely resamples, enumerated: the exact distribution is theirs
    x = [0.1 + 0.01 * i + 0.003 * i * i for i in range(n)]
    brute: Counter[float] = Counter(
        round(statistics.median(x[i] for i in pick), 12)
        for pick in itertools.product(range(n), repeat=n))
    values, cdf = bootstrap.median_distribution(x)
    exact: dict[float, float] = {}
    previous = 0.0
    for v, c in zip(values, cdf, strict=True):
        exact[round(v, 12)] = exact.get(round(v, 12), 0.0) + c - previous
        previous = c
    assert set(exact) >= set(brute)
    for v, p in exact.items():
        assert p == pytest.approx(brute.get(v, 0) / n**n, abs=1e-12)


def test_a_table_at_once_equals_one_at_a_time() -> None:
    # 70 one-run configurations of 40 iterations go through numpy arrays together
    # (median_cis); each alone through plain Python: the same intervals, bit for bit
    configs = [runs(1, 40, seed=s) for s in range(70)] + [runs(3, 9, seed=1), runs(1, 7)]
    assert bootstrap_batch.median_cis(configs) == [bootstrap.median_ci(c) for c in configs]


def _varied(seed: int) -> list[list[tuple[float, int]]]:
    """2 to 5 runs of 2 to 12 iterations (some equal lengths, some not; coarse
    times give ties), the runs' levels apart."""
    rng = random.Random(seed)
    n_runs = 2 + seed % 4
    lengths = [rng.choice([2, 3, 8, 9, 12]) for _ in range(n_runs)]
    return [[(round(rng.lognormvariate(-2.3 + 0.1 * r, 0.1), 2 + seed % 3), 8)
             for _ in range(n)] for r, n in enumerate(lengths)]


@pytest.mark.parametrize("chunk", [bootstrap.CHUNK, 9000])
def test_several_runs_at_once_equal_one_at_a_time(chunk: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # configurations with the same number of runs share the seed's draws and are
    # resampled as one array (9000 elements: chunks of one configuration); each alone
    # through _Run: the same intervals, bit for bit. A configuration alone with its
    # number of runs, and one with a run past the exact limit, go one at a time.
    monkeypatch.setattr(bootstrap_batch, "CHUNK", chunk)
    configs = [_varied(s) for s in range(40)] + [runs(6, 5, seed=7), runs(2, 401, seed=8)]
    configs += [[list(r) for r in configs[0]]] * 3  # identical data: identical rows
    assert bootstrap_batch.median_cis(configs) == [bootstrap.median_ci(c) for c in configs]


def _within_monte_carlo(data: list[list[tuple[float, int]]]) -> None:
    """The interval equals the former pure-Python one within that one's own Monte-Carlo
    error: its spread over seeds (4 sd), or 2 % of the interval where the spread is
    zero on discrete data."""
    new = bootstrap.median_ci(data)
    old = [bootstrap_ref.percentile_interval(bootstrap_ref.resamples(data, rng=random.Random(s)))
           for s in range(4)]
    width = statistics.fmean(h - lo for lo, h in old)
    for bound in (0, 1):
        got = [o[bound] for o in old]
        tol = max(4 * statistics.stdev(got), 0.02 * width)
        assert abs(new[bound] - statistics.fmean(got)) <= tol, (bound, new, old)


@pytest.mark.parametrize(("n_runs", "n_iters"), [(1, 40), (1, 41), (3, 20), (2, 7), (1, 401)])
def test_interval_equals_the_former_resampling_one(n_runs: int, n_iters: int) -> None:
    _within_monte_carlo(runs(n_runs, n_iters, seed=n_runs * 1000 + n_iters))


def test_interval_equals_the_former_one_on_a_real_campaign() -> None:
    # an H200 campaign (docs/gpu-runs): runs of 10 and 30 measured iterations
    path = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-llm/campaign.db"
    db = sqlite_utils.Database(sqlite3.connect(f"file:{path}?mode=ro", uri=True))
    ensure_views(db.conn)  # written before the readers' views: temporary ones, as readers do
    by_config = [[r.iterations for r in res.runs] for res in config_results(db, 1) if res.runs]
    assert by_config and any(len(c) == 1 for c in by_config)
    for data in by_config:
        _within_monte_carlo([list(r) for r in data])
