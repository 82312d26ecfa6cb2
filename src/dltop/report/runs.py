"""The report's per-run figures: one run over time (:mod:`dltop.results.runtrace`).

Each figure stacks panels on one time axis: s/iter per iteration (warm-up
shaded), then the loss, GPU utilization, power and memory, and CPU, each only
when the run has that series (the caption names what is left out and why).
At most ``max_runs`` runs get a figure: the first repeat of every
configuration first, so a capped report still shows each configuration once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dltop.report.model import Figure
from dltop.results import labels
from dltop.results.metrics import MIB
from dltop.results.runtrace import RunTrace, read_trace
from dltop.results.table import fmt_seconds
from dltop.textsafe import one_line

if TYPE_CHECKING:
    import sqlite_utils

MAX_POINTS = 600
"""Rows read per series: a figure shows no more than a few hundred pixels of them."""

PANELS = ("s/iter", "loss", "test accuracy", "test perplexity", "GPU util %", "GPU power W",
          "GPU memory MiB", "CPU %")


def pick_runs(db: sqlite_utils.Database, ids: Sequence[int],
              max_runs: int) -> tuple[list[dict[str, Any]], int]:
    """The runs to draw (the latest attempt of each job with iterations, first repeats
    first, then queue order) and how many there were in all."""
    marks = ",".join("?" * len(ids))
    rows = list(db.query(
        "select r.id as run_id, r.status, r.noisy, r.concurrent_runs, r.contaminated, "
        "r.telemetry_simulated, r.median_s, r.cv, r.n_iterations, j.framework, j.model, "
        "j.batch_size, j.device, j.repeat, j.campaign_id, j.position from jobs j "
        "join runs r on r.id = (select max(id) from runs where job_id = j.id) "
        f"where j.campaign_id in ({marks}) and coalesce(r.n_iterations, 0) > 0 "
        "order by j.campaign_id, j.position", list(ids)))
    # campaigns.pack tells packed runs from shared ones (absent from older databases)
    packs = {c["id"]: bool(c.get("pack")) for c in db.query(
        f"select * from campaigns where id in ({marks})", list(ids))}
    rows = [{**r, "pack": packs.get(r["campaign_id"], False)} for r in rows]
    rows.sort(key=lambda r: (r["repeat"] > 0, r["campaign_id"], r["position"]))
    chosen = rows[:max(0, max_runs)]
    chosen.sort(key=lambda r: (r["campaign_id"], r["position"]))
    return chosen, len(rows)


def run_label(row: Mapping[str, Any]) -> str:
    """``run 14: torch fcn-r b128 cpu:2 bf16 #1``: the run label (its ``settings``:
    :func:`dltop.results.labels.settings_text`) and its repeat."""
    settings = f" {row['settings']}" if row.get("settings") else ""
    return one_line(f"run {row['run_id']}: {row['framework']} {row['model']} "
                    f"b{row['batch_size']} {row['device']}{settings} #{row['repeat'] + 1}")


def run_figures(db: sqlite_utils.Database, ids: Sequence[int],
                max_runs: int) -> tuple[list[Figure], str]:
    """One figure per picked run, and the line saying how many runs are shown."""
    chosen, total = pick_runs(db, ids, max_runs)
    settings = labels.run_settings(db, [int(r["run_id"]) for r in chosen])  # the run label
    chosen = [{**r, "settings": settings.get(int(r["run_id"]), "")} for r in chosen]
    figures = [trace_figure(read_trace(db, int(r["run_id"]), max_points=MAX_POINTS), r)
               for r in chosen]
    if total == 0:
        note = "No run stored any iteration."
    elif total > len(chosen):
        note = (f"Showing {len(chosen)} of {total} runs (at most {max_runs}, --max-runs; the "
                "first repeat of each configuration first).")
    else:
        note = f"All {total} runs with iterations."
    return figures, note


def _flags(row: Mapping[str, Any]) -> list[str]:
    # concurrent runs: "packed" in a --pack campaign, "shared" (another engine's
    # runner) in one without (campaigns.pack is absent from older databases)
    pack = bool(row.get("pack"))
    return [name for name, on in (("noisy", row["noisy"]),
                                  ("packed", row["concurrent_runs"] and pack),
                                  ("shared", row["concurrent_runs"] and not pack),
                                  ("contaminated", row["contaminated"])) if on]


def trace_figure(trace: RunTrace, row: Mapping[str, Any]) -> Figure:
    """The panels of one run on its time axis (by iteration when it was pruned)."""
    by_time = not trace.pruned and all(p.t_end_s is not None for p in trace.iterations)
    x = "t" if by_time else "iteration"
    rows: list[dict[str, Any]] = []

    def add(panel: str, t: float | None, value: float | None, series: str) -> None:
        if t is not None and value is not None:
            rows.append({"panel": panel, x: round(t, 4), "value": value, "series": series})

    for p in trace.iterations:
        where = p.t_end_s if by_time else float(p.idx)
        add("s/iter", where, p.seconds, "warm-up" if p.warmup else "measured")
        add("loss", where, p.loss, "loss")
    for e in trace.evals:  # a convergence run's evaluations on the same axis
        at = e.t_s if by_time else float(e.idx)
        add("loss", at, e.loss, "test loss")
        add("test accuracy", at, e.accuracy, "test")
        add("test perplexity", at, e.perplexity, "test")
    simulated = any(s.simulated for s in trace.gpus)
    for s in trace.gpus:
        name = (f"{s.node} GPU {s.gpu_index}" if s.node else f"GPU {s.gpu_index}") + (
            " (simulated)" if s.simulated else "")
        for g in s.points:
            add("GPU util %", g.t_s, g.util_pct, name)
            add("GPU power W", g.t_s, g.power_w, name)
            add("GPU memory MiB", g.t_s,
                None if g.mem_used_bytes is None else g.mem_used_bytes / MIB, name)
    for h in trace.host:
        add("CPU %", h.t_s, h.cpu_pct, "host, % of all CPUs")
        add("CPU %", h.t_s, h.tree_cpu_pct, "run's processes, 100 = one core")
    panels = tuple(p for p in PANELS if any(r["panel"] == p for r in rows))
    measured = sum(1 for p in trace.iterations if not p.warmup)
    notes = [f"{row['status']}", f"{trace.n_iterations} iterations stored"]
    if row["median_s"] is not None:
        notes.append(f"median {fmt_seconds(float(row['median_s']))} s/iter")
    if row["cv"] is not None:
        notes.append(f"cv {float(row['cv']):.3f}")
    notes.append("flags: " + (", ".join(_flags(row)) or "none"))
    if trace.thinned_every > 1:
        notes.append(f"every {trace.thinned_every}th iteration drawn")
    if not by_time:
        notes.append("pruned run: seconds per iteration by index, no times or telemetry")
    notes += _left_out(panels, trace, by_time)
    if by_time and trace.warmup_end_s is not None:
        notes.append("shaded: warm-up (not measured)")
    if simulated:
        notes.append("GPU readings from SIMULATED GPUs (--fake-gpus)")
    title = run_label(row) + (" (simulated GPU telemetry)" if simulated else "")
    if measured == 0 and not rows:
        return Figure(f"run-{row['run_id']}", "run", title, omitted="no iteration stored")
    return Figure(f"run-{row['run_id']}", "run", title, caption="; ".join(notes) + ".",
                  rows=tuple(rows), x_title="seconds since the run started" if by_time
                  else "iteration", panels=panels,
                  extra={"x_field": x, "warmup_end_s": trace.warmup_end_s if by_time else None,
                         "warmup_start_s": _warmup_start(trace) if by_time else None,
                         "run_id": int(row["run_id"])})


def _warmup_start(trace: RunTrace) -> float | None:
    """Start of the first warm-up step: before it the runner was starting, not warming."""
    starts = [p.t_end_s - p.seconds for p in trace.iterations if p.warmup and p.t_end_s is not None]
    return max(0.0, min(starts)) if starts else None


def _left_out(panels: Sequence[str], trace: RunTrace, by_time: bool) -> list[str]:
    out = []
    if "loss" not in panels:
        out.append("loss omitted: the runner reported none")
    if by_time and not trace.gpus:
        out.append("GPU panels omitted: no GPU telemetry for this run")
    if by_time and not trace.host:
        out.append("CPU omitted: no host telemetry for this run")
    return out
