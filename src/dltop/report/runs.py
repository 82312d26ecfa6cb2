"""The report's per-run figures: one run over time (:mod:`dltop.results.runtrace`).

Each figure stacks panels on one time axis: s/iter per iteration (warm-up
shaded), then the loss, GPU utilization, power and memory, and CPU, each only
when the run has that series (the caption names what is left out and why).
At most ``max_runs`` runs get a figure: the first repeat of every
configuration first, so a capped report still shows each configuration once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.catalog import SERVE_FRAMEWORKS
from dltop.errors import UserError
from dltop.report.content import Figure
from dltop.results import labels, queries
from dltop.results.metricdefs import MIB
from dltop.results.runtrace import RunTrace, read_trace
from dltop.results.table import fmt_seconds
from dltop.store.read import series
from dltop.store.read.latest import runs_with_iterations

if TYPE_CHECKING:
    import sqlite_utils

    from dltop.store.reader import Db

MAX_POINTS = 600
"""Rows read per series: a figure shows no more than a few hundred pixels of them."""

PANELS = ("s/iter", "loss", "test accuracy", "test perplexity", "GPU util %", "GPU power W",
          "GPU memory MiB", "CPU %")


def pick_runs(db: sqlite_utils.Database, ids: Sequence[int], max_runs: int,
              only: Sequence[int] = ()) -> tuple[list[dict[str, Any]], int]:
    """The runs to draw (the latest attempt of each job with iterations, first repeats
    first, then queue order; or the runs ``only`` names) and how many there were in all.

    Raises:
        UserError: a run of ``only`` is not among them (the message names it).
    """
    rows = runs_with_iterations(db, ids)
    packed = queries.packed_campaigns(db, ids)
    rows = [{**r, "pack": r["campaign_id"] in packed} for r in rows]
    if only:
        have = {int(r["run_id"]) for r in rows}
        missing = [n for n in only if n not in have]
        if missing:
            raise UserError(
                f"--run: no run {missing[0]} with iterations in campaign "
                f"{', '.join(map(str, ids))} (the latest attempt of a job; give its "
                "--campaign; 'dltop runs' lists run ids)")
        return [r for r in rows if int(r["run_id"]) in set(only)], len(rows)
    rows.sort(key=lambda r: (r["repeat"] > 0, r["campaign_id"], r["position"]))
    chosen = rows[:max(0, max_runs)]
    chosen.sort(key=lambda r: (r["campaign_id"], r["position"]))
    return chosen, len(rows)


def run_label(row: Mapping[str, Any]) -> str:
    """``run 14: torch fcn-r b128 cpu:2 bf16 #1``: the run label (its ``settings``:
    :func:`dltop.results.labels.settings_text`) and its repeat."""
    return f"run {row['run_id']}: {queries.run_label(row, str(row.get('settings') or ''))}"


def run_figures(db: sqlite_utils.Database, ids: Sequence[int], max_runs: int,
                only: Sequence[int] = ()) -> tuple[list[Figure], str]:
    """One figure per picked run (or per run of ``only``), and the line saying how many
    runs are shown, which, and how to draw the others."""
    chosen, total = pick_runs(db, ids, max_runs, only)
    settings = labels.run_settings(db, [int(r["run_id"]) for r in chosen])  # the run label
    chosen = [{**r, "settings": settings.get(int(r["run_id"]), "")} for r in chosen]
    figures = [drawn_trace(db, int(r["run_id"]), r) for r in chosen]
    if total == 0:
        note = "No run stored any iteration."
    elif total > len(chosen):
        why = ("the runs --run names" if only else
               f"at most {max_runs}, --max-runs; the first repeat of each configuration first")
        note = (f"Showing {len(chosen)} of {total:,} runs ({why}): "
                f"{id_ranges([int(r['run_id']) for r in chosen])}; {total - len(chosen):,} "
                "left out: draw any of them with `dltop report --run N[,M...]` (`dltop "
                "runs` lists them), or raise --max-runs; their rows stay in the database.")
    else:
        note = f"All {total} runs with iterations."
    return figures, note


def id_ranges(ids: Sequence[int]) -> str:
    """``runs 1–12, 40, 45–46``: consecutive ids as ranges."""
    spans: list[list[int]] = []
    for n in sorted(ids):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)
    return f"run{'s' if len(ids) != 1 else ''} {text}"


def drawn_trace(db: Db, run_id: int, row: Mapping[str, Any]) -> Figure:
    """The figure of one run, its long series downsampled with their spikes kept."""
    trace = read_trace(db, run_id, max_points=MAX_POINTS)
    if trace.pruned or not all(p.t_end_s is not None for p in trace.iterations):
        return trace_figure(trace, row)
    return trace_figure(trace, row, read_series(db, trace))


SERIES_PANELS = (("iterations", "seconds", "s/iter"), ("iterations", "loss", "loss"),
                 ("gpu_samples", "util_mean_pct", "GPU util %"),
                 ("gpu_samples", "power_mean_w", "GPU power W"),
                 ("gpu_samples", "mem_used_max_bytes / 1048576.0", "GPU memory MiB"),
                 ("host_samples", "cpu_mean_pct", "CPU %"),
                 ("host_samples", "tree_cpu_pct", "CPU %"))
"""(table, column, panel) of every series of a run's figure read by :func:`read_series`."""
HOST_NAMES = {"cpu_mean_pct": "host, % of all CPUs",
              "tree_cpu_pct": "run's processes, 100 = one core"}


@dataclass(frozen=True)
class DrawnSeries:
    """A run's figure rows read downsampled (:mod:`dltop.store.read.series`), and what the
    caption says about it (empty when every stored row is drawn)."""

    rows: tuple[dict[str, Any], ...]
    note: str


def read_series(db: Db, trace: RunTrace) -> DrawnSeries:
    """Every series of a timed run on its axis, at most :data:`MAX_POINTS` rows each."""
    origin = series.origin_s(db, trace.run_id) or 0.0
    rows: list[dict[str, Any]] = []
    thinned: list[str] = []
    for table, column, panel in SERIES_PANELS:
        if table == "iterations":
            got = series.iteration_series(db, trace.run_id, column, MAX_POINTS)
        elif table == "gpu_samples":
            got = series.gpu_series(db, trace.run_id, column, MAX_POINTS)
        else:
            got = series.host_series(db, trace.run_id, column, MAX_POINTS)
        for r in got.rows:
            rows.append({"panel": panel, "t": round(float(r["x"]) - origin, 4),
                         "value": r["v"], "series": _series_name(table, column, r)})
        if got.downsampled:
            name = panel if table != "host_samples" else HOST_NAMES[column].split(",")[0]
            thinned.append(f"{name} {got.n_raw:,} → {len(got.rows):,}")
    note = ("downsampled for display (the min and the max of each of "
            f"{MAX_POINTS // 2} time spans, so spikes stay; the raw rows stay in the "
            f"database): {', '.join(thinned)} points") if thinned else ""
    return DrawnSeries(tuple(rows), note)


def _series_name(table: str, column: str, r: Mapping[str, Any]) -> str:
    if table == "iterations":
        return ("warm-up" if r["warmup"] else "measured") if column == "seconds" else "loss"
    if table == "host_samples":
        return HOST_NAMES[column]
    node = r.get("node")
    return (f"{node} GPU {r['gpu_index']}" if node else f"GPU {r['gpu_index']}") + (
        " (simulated)" if r["simulated"] else "")


def _flags(row: Mapping[str, Any]) -> list[str]:
    # concurrent runs: "packed" in a --pack campaign, "shared" (another engine's
    # runner) in one without (campaigns.pack is absent from older databases)
    pack = bool(row.get("pack"))
    return [name for name, on in (("noisy", row["noisy"]),
                                  ("packed", row["concurrent_runs"] and pack),
                                  ("shared", row["concurrent_runs"] and not pack),
                                  ("contaminated", row["contaminated"])) if on]


def trace_figure(trace: RunTrace, row: Mapping[str, Any],
                 drawn: DrawnSeries | None = None) -> Figure:
    """The panels of one run on its time axis (by iteration when it was pruned): the
    series of ``drawn`` (read downsampled) where given, else the trace's own."""
    by_time = not trace.pruned and all(p.t_end_s is not None for p in trace.iterations)
    x = "t" if by_time else "iteration"
    rows: list[dict[str, Any]] = []

    def add(panel: str, t: float | None, value: float | None, series: str) -> None:
        if t is not None and value is not None:
            rows.append({"panel": panel, x: round(t, 4), "value": value, "series": series})

    if drawn is not None and by_time:
        rows += drawn.rows
    else:
        _trace_rows(trace, by_time, add)
    for e in trace.evals:  # a convergence run's evaluations on the same axis
        at = e.t_s if by_time else float(e.idx)
        add("loss", at, e.loss, "test loss")
        add("test accuracy", at, e.accuracy, "test")
        add("test perplexity", at, e.perplexity, "test")
    simulated = any(s.simulated for s in trace.gpus)
    panels = tuple(p for p in PANELS if any(r["panel"] == p for r in rows))
    measured = sum(1 for p in trace.iterations if not p.warmup)
    notes = [f"{row['status']}", f"{trace.n_iterations} iterations stored"]
    serve = row["framework"] in SERVE_FRAMEWORKS
    if row["median_s"] is not None:
        notes.append(f"median {fmt_seconds(float(row['median_s']))} "
                     + ("s/request end to end" if serve else "s/iter"))
    if serve and "s/iter" in panels:  # its iterations are requests, many in flight at once
        notes.append("s/iter: each request's end-to-end seconds at its end, not a time per "
                     "iteration (requests overlap)")
    if row["cv"] is not None:
        notes.append(f"cv {float(row['cv']):.3f}")
    notes.append("flags: " + (", ".join(_flags(row)) or "none"))
    if drawn is not None and by_time:
        notes += [drawn.note] if drawn.note else []
    elif trace.thinned_every > 1:
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


def _trace_rows(trace: RunTrace, by_time: bool,
                add: Callable[[str, float | None, float | None, str], None]) -> None:
    """The figure rows of the trace's own series (a pruned or untimed run, read thinned)."""
    for p in trace.iterations:
        where = p.t_end_s if by_time else float(p.idx)
        add("s/iter", where, p.seconds, "warm-up" if p.warmup else "measured")
        add("loss", where, p.loss, "loss")
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
