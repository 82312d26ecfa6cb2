"""The report's operator profiles: per profiled run, a bar chart of its step's time by op.

The data is what ``dltop export --table profile --run N`` shows, read by the same
functions (:mod:`dltop.results.profile`): the run's top operators by self time, per
profiled step. Bars are the self CPU time and, on CUDA, the self device (kernel)
time of each operator, so the chart tells kernel time from CPU time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dltop.report.content import Figure
from dltop.results import labels
from dltop.results.profile import profile_ops, profiled_runs
from dltop.textsafe import one_line

if TYPE_CHECKING:
    import sqlite_utils

MAX_OPS = 15
"""Operators drawn per run (the table has them all)."""
MAX_RUNS = 12
"""Profiled runs drawn per report (the first ones of the campaigns)."""


def profile_figures(db: sqlite_utils.Database, ids: Sequence[int]) -> list[Figure]:
    """One figure per profiled ok run of the campaigns ``ids`` (none before migration 14)."""
    figures = []
    runs = profiled_runs(db, ids, MAX_RUNS)
    settings = labels.run_settings(db, [run.run_id for run in runs])  # the run label
    for run in runs:
        steps = run.steps
        rows: list[dict[str, Any]] = []
        for op in profile_ops(db, run.run_id, steps, top=MAX_OPS):
            name = f"{op.rank:>2} {one_line(op.name)[:48]}"
            rows.append({"op": name, "rank": op.rank, "time": "self CPU", "ms": op.self_cpu_ms})
            if op.self_device_ms is not None:
                rows.append({"op": name, "rank": op.rank, "time": "self device",
                             "ms": op.self_device_ms})
        label = f"run {run.run_id}: " + labels.compose(
            run.framework, run.model, run.batch_size, run.device,
            settings.get(run.run_id, ""), run.repeat)
        caption = (f"{steps} profiled steps after the measured ones, mean "
                   f"{run.step_ms:.3f} ms per step on "
                   f"{one_line(run.profile_device)}; the top {MAX_OPS} operators by "
                   "self time, ms per step"
                   + ("; self device: CUDA kernel time" if run.profile_device == "cuda"
                      else "") + f" (dltop export --table profile --run {run.run_id}).")
        figures.append(Figure(f"profile-run-{run.run_id}", "profile", label, caption=caption,
                              rows=tuple(rows), x_title="ms per step",
                              omitted="" if rows else "no operator stored"))
    return figures

