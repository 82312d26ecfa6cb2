"""A run's series downsampled for display, spikes kept: the min and the max of each bucket.

A run of a million iterations, or a day of telemetry windows, is drawn from a few
hundred points per series: the time axis is split into ``max_points / 2`` equal
buckets and each bucket gives its smallest and its largest value, each at its own
time (min/max decimation, as oscilloscopes draw). Unlike keeping every k-th
row, a single slow step or power spike always survives. SQLite does the work (one
scan per series with a window function; its min()/max() aggregates take the other
columns from the row holding the extreme) in one indexed scan per aggregate, so the
report never holds the raw rows.
The raw rows stay in the database; only the figure is thinned, and its caption says
from how many points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.store.samples import gpu_node_column

if TYPE_CHECKING:
    from dltop.store.reader import Db


@dataclass(frozen=True)
class Series:
    """One downsampled series: its rows (``x``, ``v`` and the ``keep`` columns) in order."""

    rows: tuple[dict[str, Any], ...]
    n_raw: int
    """Rows with a value before downsampling."""

    @property
    def downsampled(self) -> bool:
        """Whether fewer rows are drawn than were stored."""
        return len(self.rows) < self.n_raw


def minmax(db: Db, table: str, run_id: int, x: str, value: str,
           max_points: int, *, keep: Sequence[str] = (), part: Sequence[str] = ()) -> Series:
    """The rows of ``table`` for ``run_id`` ordered by ``x``, at most ``max_points`` per
    partition: the min and max of ``value`` in each of ``max_points / 2`` equal spans
    of ``x``.

    Args:
        db: any dltop database connection (read-only is enough).
        table: ``iterations``, ``gpu_samples`` or ``host_samples``.
        run_id: the run.
        x: the column ordering the rows (an SQL expression); returned as ``x``.
        value: the column downsampled (an SQL expression); returned as ``v``.
        max_points: most rows returned per partition (two per bucket).
        keep: other columns returned, taken from the row holding the extreme.
        part: columns splitting the rows into separate series (each bucketed on its own),
            returned under their names.

    Returns:
        The series; rows without a value are left out.
    """
    n, lo, hi = db.execute(f"select count(*), min({x}), max({x}) from {table} "
                           f"where run_id = ? and ({value}) is not null", [run_id]).fetchone()
    if not n:
        return Series((), 0)
    buckets = max(1, max_points // 2)
    span = (float(hi) - float(lo)) or 1.0
    named = [*(f"{c} as {c}" for c in part), *(f"{c} as {c}" for c in keep)]
    if n <= max_points:
        # every row fits: none is dropped (three quick steps after a slow first one share
        # a span, and the middle one was lost from a 5-step run's figure: "5 → 4")
        rows = tuple(dict(r) for r in db.query(
            f"select {', '.join([*named, f'({x}) as x', f'({value}) as v'])} from {table} "
            f"where run_id = ? and ({value}) is not null order by {', '.join([*part, 'x'])}",
            [run_id]))
        return Series(rows, int(n))
    cols = ", ".join([*part, *keep, "x"])
    # equal-width buckets of the x axis (what a pixel column covers), no window function:
    # one indexed scan per aggregate
    inner = (f"select {', '.join([*named, f'({x}) as x', f'({value}) as v'])}, "
             f"min({buckets - 1}, cast((({x}) - ?) * {buckets} / ? as integer)) as b "
             f"from {table} where run_id = ? and ({value}) is not null")
    group = ", ".join([*part, "b"])
    sql = (f"select {cols}, min(v) as v from ({inner}) group by {group} union "
           f"select {cols}, max(v) as v from ({inner}) group by {group} "
           f"order by {', '.join([*part, 'x'])}")
    rows = tuple(dict(r) for r in db.query(sql, [lo, span, run_id, lo, span, run_id]))
    return Series(rows, int(n))


def iteration_series(db: Db, run_id: int, value: str, max_points: int) -> Series:
    """s/iter (``seconds``) or ``loss`` per iteration, warm-up steps their own series
    (``warmup`` column), ``x`` the step's end in seconds of the monotonic clock."""
    return minmax(db, "iterations", run_id, "t_mono_ns / 1e9", value, max_points,
                  keep=("idx",), part=("warmup",))


def gpu_series(db: Db, run_id: int, value: str, max_points: int) -> Series:
    """One GPU column per (node, GPU) of the run, ``x`` the window's start."""
    node = gpu_node_column(db)
    part = ("gpu_index", "simulated") if node == "null" else ("node", "gpu_index", "simulated")
    return minmax(db, "gpu_samples", run_id, "t_start_mono_s", value, max_points, part=part)


def host_series(db: Db, run_id: int, value: str, max_points: int) -> Series:
    """One host column, ``x`` the window's start."""
    return minmax(db, "host_samples", run_id, "t_start_mono_s", value, max_points)


def origin_s(db: Db, run_id: int) -> float | None:
    """The run's time origin on the monotonic clock, as :mod:`dltop.results.runtrace`
    sets it: the start of its first iteration or its first telemetry window."""
    starts = [r[0] for r in db.execute(
        "select (select t_mono_ns / 1e9 - seconds from iterations where run_id = ?1 "
        "and t_mono_ns is not null order by idx limit 1) union all "
        "select min(t_start_mono_s) from gpu_samples where run_id = ?1 union all "
        "select min(t_start_mono_s) from host_samples where run_id = ?1",
        [run_id]).fetchall() if r[0] is not None]
    return min(starts) if starts else None

