"""Bootstrap intervals of a table's configurations at once, equal to one at a time.

:func:`dltop.results.bootstrap.median_ci` computes one configuration's interval;
:func:`median_cis` gives the same intervals for a whole table, as numpy arrays
where configurations share work (issue 32):

- One run of n iterations: the exact distribution of its median is a stable sort
  and a running sum over pairs whose probabilities depend on n only, so the
  runs of a length are sorted and summed as the rows of one array.
- Several runs: every configuration is resampled from ``default_rng(SEED)``, so
  two configurations with the same number of runs draw the same run picks and,
  when every run's median comes from its exact distribution, the same uniform
  numbers (one per drawn run, whatever the run's length). Those numbers are drawn
  once per number of runs and applied to the configurations' distributions as
  rows of arrays; the medians over drawn runs and their percentiles are taken
  along the rows. Same operations on the same numbers: the same intervals.

Arrays hold about :data:`~dltop.results.bootstrap.CHUNK` elements at most: a group
larger than that is computed a chunk of configurations at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from dltop.results import bootstrap
from dltop.results.bootstrap import (
    CHUNK,
    CONFIDENCE,
    EXACT_MAX_ITERATIONS,
    RESAMPLES,
    Floats,
    Sample,
)

BATCH_MIN = 64
"""Fewer one-run configurations of a length are computed one by one, without numpy."""

Runs = Sequence[Sequence[Sample]]
Interval = tuple[float, float]


def median_cis(configs: Sequence[Runs]) -> list[Interval]:
    """:func:`~dltop.results.bootstrap.median_ci` of each configuration (a table's
    worth at once, the same intervals).

    One-run configurations of equal length, :data:`BATCH_MIN` or more of them, and
    configurations with the same number of runs (two or more of them, every run of
    at most :data:`~dltop.results.bootstrap.EXACT_MAX_ITERATIONS` iterations) are
    computed together; the others one at a time.

    Raises:
        ValueError: as ``median_ci``, for the first configuration it refuses.
    """
    out: list[Interval | None] = [None] * len(configs)
    seconds = [bootstrap._checked_seconds(runs) for runs in configs]
    one_run: dict[int, list[int]] = {}
    several: dict[int, list[int]] = {}
    for k, runs in enumerate(seconds):
        if len(runs) == 1 and len(runs[0]) <= EXACT_MAX_ITERATIONS:
            one_run.setdefault(len(runs[0]), []).append(k)
        elif len(runs) > 1 and all(len(r) <= EXACT_MAX_ITERATIONS for r in runs):
            several.setdefault(len(runs), []).append(k)
    for n, ks in one_run.items():
        if len(ks) < BATCH_MIN:
            for k in ks:
                out[k] = bootstrap._exact_interval(seconds[k][0])
            continue
        step = max(1, CHUNK // len(bootstrap._pair_probabilities(n)[0]))
        for start in range(0, len(ks), step):
            part = ks[start:start + step]
            found = _exact_batch(n, [seconds[k][0] for k in part])
            for k, interval in zip(part, found, strict=True):
                out[k] = interval
    for n_runs, ks in several.items():
        if len(ks) < 2:  # nothing to share
            continue
        for k, interval in zip(ks, _several(n_runs, [seconds[k] for k in ks]), strict=True):
            out[k] = interval
    return [interval if interval is not None else bootstrap.median_ci(configs[k])
            for k, interval in enumerate(out)]


def _distributions(n: int, rows: list[list[float]]) -> tuple[Floats, Floats]:
    """Each row's median distribution (values ascending, cumulative probabilities),
    computed as :class:`~dltop.results.bootstrap._Run` does for one run."""
    import numpy as np

    i, j, p = bootstrap._pair_arrays(n)
    x = np.sort(np.array(rows), axis=1)
    values = (x[:, i] + x[:, j]) / 2.0
    # A row without equal values has one ascending order, which any sort finds: numpy's
    # default sort finds it faster than the stable one (30 % of this function); rows
    # with ties are sorted again stably, their equal values in pair order as one run's.
    order = np.argsort(values, axis=1)
    ascending = np.take_along_axis(values, order, axis=1)
    tied = np.flatnonzero((ascending[:, 1:] == ascending[:, :-1]).any(axis=1))
    if len(tied):
        order[tied] = np.argsort(values[tied], axis=1, kind="stable")
        ascending[tied] = np.take_along_axis(values[tied], order[tied], axis=1)
    cdf: Floats = np.cumsum(p[order], axis=1)
    return ascending, cdf


def _exact_batch(n: int, rows: list[list[float]]) -> list[Interval]:
    """The exact one-run interval of equal-length runs, one array row each."""
    import numpy as np

    values, cdf = _distributions(n, rows)
    tail = (1.0 - CONFIDENCE) / 2.0
    last = values.shape[1] - 1
    # the first value whose cumulative probability reaches q (bisect_left), by row
    lows = np.minimum((cdf < tail * cdf[:, -1:]).sum(axis=1), last)
    highs = np.minimum((cdf < (1.0 - tail) * cdf[:, -1:]).sum(axis=1), last)
    at = np.arange(len(rows))
    return list(zip(values[at, lows].tolist(), values[at, highs].tolist(), strict=True))


def _several(n_runs: int, configs: list[list[list[float]]]) -> list[Interval]:
    """The intervals of configurations of ``n_runs`` exact runs each (each run's
    seconds), from the draws ``bootstrap._replicates`` makes for each of them: the run
    picks, then for each run in turn one uniform number per slot that picked it."""
    import numpy as np

    rng = bootstrap._rng()
    picks = rng.integers(0, n_runs, size=(RESAMPLES, n_runs))
    slots, uniforms = [], []
    for r in range(n_runs):
        where = picks == r
        count = int(where.sum())
        drawn_u = rng.random(count) if count else np.empty(0)
        # ascending, each with its slot (row-major, as drawn[where] = ... fills them)
        order = np.argsort(drawn_u, kind="stable")
        slots.append(np.flatnonzero(where)[order])
        uniforms.append(drawn_u[order])
    widest = max(len(bootstrap._pair_probabilities(len(run))[0])
                 for runs in configs for run in runs)
    # a row's draws and widest distribution, about four times over (the draws, the
    # targets, their merge with the distribution and its order): CHUNK elements in all,
    # ~40 MB at a time; smaller chunks also ran faster (cache) than 4× larger
    step = max(1, CHUNK // (4 * (RESAMPLES * n_runs + widest)))
    tail = (1.0 - CONFIDENCE) / 2.0
    out: list[Interval] = []
    for start in range(0, len(configs), step):
        part = configs[start:start + step]
        drawn = np.empty((len(part), RESAMPLES * n_runs))
        for r in range(n_runs):
            if not len(slots[r]):
                continue
            by_n: dict[int, list[int]] = {}
            for row, runs in enumerate(part):
                by_n.setdefault(len(runs[r]), []).append(row)
            for n, rows in by_n.items():
                values, cdf = _distributions(n, [part[row][r] for row in rows])
                picked = _pick(values, cdf, uniforms[r])
                if len(rows) == len(part):
                    drawn[:, slots[r]] = picked
                else:
                    drawn[np.ix_(np.array(rows), slots[r])] = picked
        medians = _medians(drawn.reshape(len(part), RESAMPLES, n_runs))
        lows, highs = np.quantile(medians, [tail, 1.0 - tail], axis=1)
        out += zip(lows.tolist(), highs.tolist(), strict=True)
    return out


def _medians(drawn: Floats) -> Floats:
    """``np.median(drawn, axis=2)``, the same numbers: for 2 and 3 runs as elementwise
    operations, not a partition of millions of rows of 2 or 3."""
    import numpy as np

    a, b = drawn[:, :, 0], drawn[:, :, 1]
    if drawn.shape[2] == 2:
        mean: Floats = (a + b) / 2.0  # np.median's mean of the middle pair
        return mean
    if drawn.shape[2] == 3:
        middle: Floats = np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b),
                                                                 drawn[:, :, 2]))
        return middle
    median: Floats = np.median(drawn, axis=2)
    return median


def _pick(values: Floats, cdf: Floats, uniforms: Floats) -> Floats:
    """Row by row, the values ascending uniform numbers pick, as ``_Run.draw``: for
    ``u``, the first value whose cumulative probability exceeds ``u`` times the row's
    total (at most the last).

    numpy has no searchsorted by row; a stable sort of each row's cumulative
    probabilities followed by its targets (both ascending) merges them, a cumulative
    probability before an equal target, so the probabilities before a target are
    those ``searchsorted(side="right")`` counts: its position in the merge less the
    targets before it.
    """
    import numpy as np

    rows, width = cdf.shape
    targets = uniforms[None, :] * cdf[:, -1:]  # the numbers _Run.draw compares
    merged = np.argsort(np.concatenate([cdf, targets], axis=1), axis=1, kind="stable")
    at = np.flatnonzero(merged >= width).reshape(rows, len(uniforms))
    at -= np.arange(rows)[:, None] * (width + len(uniforms)) + np.arange(len(uniforms))
    np.minimum(at, width - 1, out=at)
    picked: Floats = np.take_along_axis(values, at, axis=1)
    return picked
