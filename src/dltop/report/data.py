"""What each figure of the report plots, read from :mod:`dltop.results`.

A :class:`Figure` is data only: its rows (one dict per mark, as Vega-Lite's inline
``data.values`` takes them), its title, and the caption that makes it honest: n
(ok runs per point), the spread the error bars show, and which runs were noisy,
packed or contaminated. :mod:`dltop.report.specs` turns it into a Vega-Lite
spec at any size; a figure without data carries :attr:`Figure.omitted` (one line
saying why) instead of rows, so the report says so rather than drawing it empty.

The figures follow the seed studies: time per mini-batch vs threads or GPUs per
framework (DLBench), the scaling panel (speedup and efficiency vs devices with
the ideal line), throughput and GPU memory vs batch (Liu et al.), mean power and
energy per sample per framework (bars), and each run over time (Liu et al.'s
per-iteration trace) with its device readings (:mod:`dltop.results.runtrace`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dltop.catalog import JobStatus, RunStatus
from dltop.errors import UserError
from dltop.report import captions, encode
from dltop.report.captions import cap_lines, flagged_text, n_text
from dltop.report.content import Figure, Report
from dltop.report.energy import energy_figure
from dltop.report.generation import generation_figures
from dltop.report.leftout import failed_text
from dltop.report.precision import precision_figures
from dltop.report.profiles import profile_figures
from dltop.report.runs import pick_runs, run_figures
from dltop.report.serving import serve_run_figures, serving_figures
from dltop.results import (
    caption,
    identity,
    idread,
    labels,
    overhead,
    queries,
    scaling,
    slo,
    summary,
    tokens,
)
from dltop.results.aggregate import ConfigResult, config_results, floats
from dltop.results.metrics import value_of
from dltop.results.places import placed_identities
from dltop.results.table import Table, fmt_seconds
from dltop.store.read.latest import failed_runs
from dltop.textsafe import one_line

if TYPE_CHECKING:
    import sqlite_utils

FAMILY_AXIS = {"cpu": "threads", "cpus": "CPU worker processes", "gpu": "GPUs"}
"""The x axis of a device family's figures."""
MAX_RUNS = 24
"""Per-run figures drawn at most (each is a few panels of SVG)."""
SPREAD_TIME = "error bars: min–max of the runs' median s/iter"


def _named(r: ConfigResult, results: Sequence[ConfigResult]) -> str:
    """``r``'s run label against the fields varying among ``results`` (the figure's)."""
    return captions.at_host(labels.label(
        r.identity, identity.variation(x.identity for x in results).fields), r, results)


def spread_text(results: Sequence[ConfigResult]) -> str:
    """The largest spread of the runs' medians, absolute and relative to its median, and
    whose (its run label)."""
    best: tuple[float, ConfigResult] | None = None
    for r in results:
        if r.spread_s is not None and r.median_s and (best is None or
                                                      r.spread_s / r.median_s > best[0]):
            best = (r.spread_s / r.median_s, r)
    if best is None or best[1].n_runs < 2:
        return f"{SPREAD_TIME} (one run per point: no spread)"
    rel, r = best
    return (f"{SPREAD_TIME}; largest spread {fmt_seconds(r.spread_s or 0.0)} s "
            f"({rel:.0%} of the median, {_named(r, results)})")


def rate_spread_text(results: Sequence[ConfigResult], unit: str = "samples/s") -> str:
    """The largest spread of the runs' ``unit`` (samples/s, tokens/s) relative to the
    configuration's, and whose (its run label)."""
    best: tuple[float, ConfigResult] | None = None
    for r in results:
        rates = [x for x in (run.samples_per_s for run in r.runs) if x is not None]
        if len(rates) > 1 and r.samples_per_s:
            rel = (max(rates) - min(rates)) / r.samples_per_s
            if best is None or rel > best[0]:
                best = (rel, r)
    if best is None:
        return "one run per point: no spread"
    rel, r = best
    return (f"largest spread of the runs' {unit} {rel:.0%} of the median "
            f"({_named(r, results)})")


def _join(notes: Sequence[str]) -> str:
    """A caption of its non-empty parts."""
    return "; ".join(n for n in notes if n) + "."


def device_figures(results: Sequence[ConfigResult], var: identity.Variation) -> list[Figure]:
    """Per model and device family: median s/iter vs device count, one line per
    framework (and batch), with the runs' min–max as error bars. A served model's is its
    median end-to-end request latency (the time a serve run measures), titled so."""
    out = []
    for model in captions.models(results):
        for family, serve in [(f, s) for f in ("cpu", "cpus", "gpu") for s in (False, True)]:
            mine = [r for r in results if r.model == model and r.device_kind == family
                    and (r.identity.get("mode") == "serve") == serve]
            if not mine:
                continue
            axis = FAMILY_AXIS[family]
            key, title = (f"latency-{model}-{family}",
                          f"{model}: median e2e request latency vs {axis}") if serve else (
                f"time-{model}-{family}", f"{model}: time per mini-batch vs {axis}")
            ok = sorted((r for r in mine if r.median_s is not None), key=captions.order)
            counts = {r.device_count for r in ok}
            if len(counts) < 2:
                why = "no ok run" if not ok else f"{axis}: one count only ({min(counts)})"
                out.append(Figure(key, "devices", title, omitted=why))
                continue
            hosts = len({r.host for r in ok}) > 1
            enc = encode.encoding(ok, var)  # colour and facets from what varies here
            rows, capped = cap_lines([
                {**enc.row(r, host=hosts), "devices": r.device_count, "seconds": r.median_s,
                 "low": min(floats(r.runs, "median_s")),
                 "high": max(floats(r.runs, "median_s")), "n": r.n_runs}
                for r in ok])
            spread = spread_text(ok)
            if serve:  # a serve run's median s/iter is its requests' median e2e s
                spread = spread.replace("median s/iter", "median e2e s per request")
            notes = [enc.same, n_text(ok), spread, flagged_text(ok), capped]
            out.append(Figure(key, "devices", title, rows=tuple(rows), x_title=axis,
                              caption=_join(notes), extra={"color": enc.color, **(
                                  {"y_title": "median e2e s per request"} if serve else {})}))
    return out


def scaling_figures(db: sqlite_utils.Database, ids: Sequence[int],
                    results: Sequence[ConfigResult], var: identity.Variation) -> list[Figure]:
    """Per model and family: speedup and efficiency vs devices against the group's
    1-device run (:mod:`dltop.results.scaling`), the ideal line dashed."""
    srows = [r for r in scaling.scaling_rows(db, ids, results=results)
             if r.speedup is not None]
    out = []
    for model in captions.models(results):
        for family in ("cpu", "cpus", "gpu"):
            mine = [r for r in srows if r.model == model and r.device.startswith(family + ":")]
            confs = [r for r in results if r.model == model and r.device_kind == family]
            if not confs:
                continue
            axis = FAMILY_AXIS[family]
            key, title = f"scaling-{model}-{family}", f"{model}: scaling with {axis}"
            if len({r.n_devices for r in mine}) < 2:
                out.append(Figure(key, "scaling", title, omitted=(
                    f"no configuration ran on several {axis} counts with its 1-device "
                    "baseline")))
                continue
            many = len({r.batch_size for r in mine}) > 1
            hosts = len({r.host for r in mine}) > 1
            enc = encode.encoding(mine, var)  # colour and facets from what varies here
            rows, capped = cap_lines([
                {**enc.row(r, batch=many, host=hosts), "devices": r.n_devices,
                 "speedup": r.speedup, "efficiency": r.efficiency, "marks": r.marks}
                for r in mine])
            ok = [r for r in confs if r.median_s is not None]
            unit = tokens.row_unit("throughput", model)
            what = f"{unit} against the same framework and batch"
            if all(r.identity.get("mode") == "serve" for r in mine):
                # a serve run's rate is one request's: its speedup is the median e2e
                # request latency's, not a mini-batch's (metricdefs' serve names)
                unit = "tokens/s per request"
                what = f"{unit} (output tokens / e2e request latency) against the same framework"
                title = f"{model}: median e2e request latency scaling with {axis}"
            out.append(Figure(
                key, "scaling", title, rows=tuple(rows), x_title=axis,
                panels=("speedup", "efficiency"),
                extra={"max_devices": max(r.n_devices for r in mine), "color": enc.color},
                caption=(f"Speedup: {what} on one "
                         "device; efficiency = speedup / N; dashed: ideal. "
                         + _join([enc.same, n_text(ok), rate_spread_text(ok, unit),
                                  flagged_text(ok), capped]))))
    return out


def batch_figures(results: Sequence[ConfigResult], var: identity.Variation) -> list[Figure]:
    """Per model: throughput (and GPU memory, where measured) vs batch size."""
    out = []
    for model in captions.models(results):
        ok = sorted((r for r in results if r.model == model and r.samples_per_s is not None),
                    key=captions.order)
        key, title = f"batch-{model}", f"{model}: throughput and GPU memory vs batch size"
        batches = {r.batch_size for r in ok}
        if len(batches) < 2:
            why = "no ok run" if not ok else f"one batch size only ({min(batches)})"
            out.append(Figure(key, "batch", title, omitted=why))
            continue
        rows: list[dict[str, Any]] = []
        simulated = False
        unit = tokens.row_unit("throughput", model)  # tokens/s for a transformer
        hosts = len({x.host for x in ok}) > 1  # once: per row it was quadratic (30 s at 10 000)
        devices = len({x.device for x in ok}) > 1
        short = encode.variants(ok)  # a legend's and a lone point's words
        for r in ok:
            series = f"{captions.label(r, var, batch=False, host=hosts)} {r.device}"
            rates = [x for x in (run.samples_per_s for run in r.runs) if x is not None]
            variant = f"{short[id(r)]}{f' {r.device}' if devices else ''}".strip()
            mode = str(r.identity.get("mode") or "train")  # its own axes (specs.batch_spec)
            rows.append({"panel": unit, "framework": r.framework, "series": series,
                         "variant": variant, "mode": mode,
                         "batch": r.batch_size, "value": r.samples_per_s,
                         "low": min(rates, default=None), "high": max(rates, default=None)})
            mem = value_of(r, "gpu-memory")
            number = mem.value if mem.value is not None else mem.simulated_value
            if number is not None:
                simulated = simulated or mem.simulated_value is not None
                rows.append({"panel": "GPU memory MiB", "framework": r.framework,
                             "series": series, "variant": variant, "batch": r.batch_size,
                             "value": number, "mode": mode})
        rows, capped = cap_lines(rows)
        panels = tuple(dict.fromkeys(str(row["panel"]) for row in rows))
        notes = [n_text(ok), f"error bars: min–max of the runs' {unit}",
                 rate_spread_text(ok, unit), flagged_text(ok), capped]
        if len(panels) == 1:
            gpu = any(r.device_kind == "gpu" for r in ok)
            notes.append("GPU memory omitted: " + (
                "not sampled" if gpu else "no GPU run (CPU configurations only)"))
            title = f"{model}: throughput vs batch size"
        elif simulated:
            notes.append("GPU memory read from SIMULATED GPUs (--fake-gpus)")
            title += " (simulated GPU telemetry)"
        out.append(Figure(key, "batch", title, rows=tuple(rows), x_title="batch size",
                          panels=panels, caption=_join(notes)))
    return out


def failure_reasons(db: sqlite_utils.Database, ids: Sequence[int]) -> dict[str, str]:
    """Configuration key → the message of its first failed latest run (one line)."""
    out: dict[str, str] = {}
    for cid in ids:
        idents = idread.ran_identities(db, cid)  # jobs with a run: what it joins
        for row in failed_runs(db, cid):
            cause = queries.message_cause(row["error_message"]) or row["status"]
            out.setdefault(idread.key(idents[row["job_id"]]), one_line(cause)[:300])
    return out


def build(db: sqlite_utils.Database, camps: Sequence[queries.CampaignRow], *,
          max_runs: int = MAX_RUNS, only_runs: Sequence[int] = ()) -> Report:
    """The report of ``camps``: settings, summary table, figures and run traces (of
    ``only_runs`` where given, else of at most ``max_runs`` runs).

    Raises:
        UserError: a run of ``only_runs`` is not in ``camps``.
    """
    ids = [c.id for c in camps]
    if only_runs:  # a wrong --run is refused before the long reads below
        pick_runs(db, ids, max_runs, only_runs)
    results = config_results(db, ids)
    var = identity.variation(placed_identities(results))
    table = summary.summary_table(db, camps)
    by_key = failure_reasons(db, ids)
    status_at = [c.key for c in table.columns].index("status")
    reasons = {i: by_key[k] for i, row in enumerate(table.rows)
               if (k := idread.key(row.extra.get("identity", {}))) in by_key
               and (cell := row.cells[status_at]) is not None and cell.text != "ok"}
    env = caption.environment(db, ids)
    title = caption.title(camps, "report")
    figures: list[Figure] = []
    runs: list[Figure] = []
    note = empty = ""
    if any(r.runs for r in results):
        figures = [*device_figures(results, var), *scaling_figures(db, ids, results, var),
                   *batch_figures(results, var), *generation_figures(results),
                   *serving_figures(results),
                   energy_figure(results, var), *precision_figures(results, var),
                   *profile_figures(db, ids)]
        runs, note = run_figures(db, ids, max_runs, only_runs)
        runs = serve_run_figures(db, runs)
    else:
        what = ", ".join(f"{c.id} `{one_line(c.name)}` ({c.status})" for c in camps)
        ended = any(r.status not in (JobStatus.QUEUED, RunStatus.RUNNING) for r in results)
        empty = (f"No run of campaign {what} ended ok: nothing to plot (the summary says "
                 "why)." if ended else
                 f"No finished run in campaign {what}: nothing to plot yet.")
    return Report(title=title, campaigns=tuple(camps), constants=var.caption(),
                  environment=tuple(env.items()), summary=table, reasons=reasons,
                  figures=tuple(figures), runs=tuple(runs), runs_note=note, empty=empty,
                  left_out=failed_text(results) if figures else "",
                  slo=_answer(slo.slo_table, db, camps, results),
                  overhead=_answer(overhead.overhead_table, db, camps, results))


def _answer(make: Callable[..., Table], db: sqlite_utils.Database,
            camps: Sequence[queries.CampaignRow],
            results: Sequence[ConfigResult]) -> Table | None:
    """A serving section's table (``slo``: the capacity at the SLOs; ``overhead``: the
    server beside dltop's own generate runs), or None where the campaigns cannot give
    it (no serve run; no SLO or rate sweep; no pair: what ``export --table`` refuses)."""
    if not any(r.identity.get("mode") == "serve" for r in results):
        return None
    try:
        return make(db, camps, results=results)
    except UserError:
        return None
