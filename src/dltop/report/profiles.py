"""The report's operator profiles: per profiled run, a bar chart of its step's time by op.

The data is what ``dltop export --table profile --run N`` shows
(:mod:`dltop.results.profile`): the run's top operators by self time, per
profiled step. Bars are the self CPU time and, on CUDA, the self device (kernel)
time of each operator, so the chart tells kernel time from CPU time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dltop.report.model import Figure
from dltop.textsafe import one_line

if TYPE_CHECKING:
    import sqlite_utils

MAX_OPS = 15
"""Operators drawn per run (the table has them all)."""
MAX_RUNS = 12
"""Profiled runs drawn per report (the first ones of the campaigns)."""


def profile_figures(db: sqlite_utils.Database, ids: Sequence[int]) -> list[Figure]:
    """One figure per profiled ok run of the campaigns ``ids`` (none before migration 14)."""
    if not ids or "profile_ops" not in db.table_names():
        return []
    marks = ",".join("?" * len(ids))
    runs = list(db.query(
        "select r.id, r.profile_steps, r.profile_step_ms, r.profile_device, j.framework, "
        "j.model, j.batch_size, j.device, j.repeat from runs r join jobs j on j.id = r.job_id "
        f"where r.campaign_id in ({marks}) and r.status = 'ok' and r.profile_steps > 0 "
        f"order by r.id limit {MAX_RUNS}", list(ids)))
    figures = []
    for run in runs:
        steps = int(run["profile_steps"])
        rows: list[dict[str, Any]] = []
        for op in db.query("select rank, name, self_cpu_ms, self_device_ms from profile_ops "
                           "where run_id = ? and rank <= ? order by rank",
                           [run["id"], MAX_OPS]):
            name = f"{int(op['rank']):>2} {one_line(str(op['name']))[:48]}"
            rows.append({"op": name, "rank": op["rank"], "time": "self CPU",
                         "ms": op["self_cpu_ms"] / steps})
            if op["self_device_ms"] is not None:
                rows.append({"op": name, "rank": op["rank"], "time": "self device",
                             "ms": op["self_device_ms"] / steps})
        label = one_line(f"run {run['id']}: {run['framework']} {run['model']} "
                         f"b{run['batch_size']} {run['device']} #{int(run['repeat']) + 1}")
        caption = (f"{steps} profiled steps after the measured ones, mean "
                   f"{float(run['profile_step_ms']):.3f} ms per step on "
                   f"{one_line(str(run['profile_device']))}; the top {MAX_OPS} operators by "
                   "self time, ms per step"
                   + ("; self device: CUDA kernel time" if run["profile_device"] == "cuda"
                      else "") + f" (dltop export --table profile --run {run['id']}).")
        figures.append(Figure(f"profile-run-{run['id']}", "profile", label, caption=caption,
                              rows=tuple(rows), x_title="ms per step",
                              omitted="" if rows else "no operator stored"))
    return figures

