"""The summary table: one row per configuration, every metric side by side.

Columns: the configuration (model, framework, batch, device, precision, and
every other identity field that varies in the campaign, see
:mod:`dltop.results.identity`; the constant ones are a footnote), the ok runs
over the repeats planned, the median seconds per mini-batch with its 95 %
bootstrap confidence interval (:mod:`dltop.results.bootstrap`), the mean,
throughput, power, energy per sample, GPU memory (the run's processes and the
device peak), peak RSS, CPU (process tree and host, with the host's
user/system/iowait split), achieved TFLOP/s, MFU,
the status and the flags (noisy, packed, contaminated, simulated, incomplete).
A cell without a value says why (:mod:`dltop.results.metrics`); JSON rows carry
those reasons under ``"reasons"``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.results import (
    bootstrap_batch,
    caption,
    identity,
    oversub,
    queries,
    references,
    tokens,
)
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.convergence import percentile_or_none
from dltop.results.convmetrics import may_have_value
from dltop.results.gcpause import gc_paused
from dltop.results.measured import seconds_of
from dltop.results.metricdefs import CONVERGENCE, GENERATION, READINGS, SUMMARY, Metric, metric
from dltop.results.metrics import MIXED_FLAG, value_of
from dltop.results.places import device_key, place_labeller, placed_identities, rank
from dltop.results.readings import readings_check
from dltop.results.table import (
    Cell,
    Column,
    Role,
    Row,
    Table,
    fmt_seconds,
    key_cell,
    pick_columns,
)
from dltop.telemetry import readings

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils


KEYS = (Column("model", "model", Role.KEY, latex_header="Model"),
        Column("framework", "framework", Role.KEY, latex_header="Framework"),
        Column("batch", "batch", Role.KEY, latex_header="Batch"),
        Column("device", "device", Role.KEY, latex_header="Device"),
        *(Column(name, identity.header(name), Role.KEY,
                 latex_header=identity.header(name).capitalize(), setting=True)
          for name in identity.ROW_KEYS))
"""Row keys of every summary: the base keys, then the identity's declared row keys."""

FLOPS_NOTE = (
    "TFLOP/s: the runner's training FLOPs per sample (3 × forward, multiply-accumulates "
    "× 2) × samples/s. MFU: TFLOP/s ÷ (the devices' dense peak for the precision × "
    "devices); see docs/metrics.md for the peak table.")
NOTES = (
    "runs: ok runs / repeats planned. median: median over runs of each run's median "
    "s/iter; CI: 95 % two-level bootstrap interval of that median (2000 seeded resamples "
    "of runs, then of each run's iterations; n/a for one run, whose iterations cannot show "
    "the run-to-run spread: JSON rows give its within-run p10-p90 under \"within_run\"). "
    "mean: mean of run means. samples/s: median "
    "over runs of total samples / total measured seconds. power, J/sample, CPU: mean over "
    "runs; memory: maximum over runs.",
    "GPU mem: peak of the run's own processes ((device): processes not visible, the "
    "device's peak instead); GPU dev: peak used on the run's GPUs by all processes. CPU: "
    "the run's process tree, 100 = one core; host CPU: whole host, mean over cores; host "
    "usr/sys/iowait: the whole host's CPU time in user mode (nice included), in the kernel "
    "(irq included) and idle waiting for I/O, in % of all CPUs (iowait: Linux only).",
    FLOPS_NOTE,
    "flags: noisy (a run's CV > 0.10), packed (other runs of a --pack campaign shared the "
    "host), shared (another engine's runner used its devices), contaminated "
    "(a foreign process used the run's devices), simulated (GPU readings from simulated "
    "GPUs: their numbers are not shown), oversubscribed (cpu:N on a host of fewer than N "
    "logical CPUs: the caption says which), mixed versions (its runs ran under different "
    "dltop or framework versions: which follow), incomplete (fewer ok runs than planned).",
)

SERVING_NOTE = (
    "Serve runs (requests to an endpoint, docs/serving.md): TTFT, TPOT, ITL and latency "
    "are the client's, from each request's send; req/s, out tok/s and goodput over the "
    "measured window; flag client-bound: the client fell behind its schedule (dispatch lag "
    "p99 over 10 ms, or its CPU over 90 % of a core).")
GENERATION_NOTE = (
    "Generate runs (samples are generated tokens: samples/s is batch × new tokens over "
    "each request's end-to-end seconds): latency = end-to-end seconds per request; TTFT = "
    "prompt in to first token out (prefill and the first token's sampling, device "
    "synchronised); TPOT = (end to end - TTFT) / (new tokens - 1) per request; ITL = every "
    "later token's latency; p50 / p90 / p99 over the measured requests (ITL: latencies) of "
    "the ok runs together, JSON rows give n under \"detail\"; a percentile from too few "
    "(p90: n < 10, p99: n < 100) is n/a: n=N (docs/metrics.md). decode tok/s: batch × (new "
    "tokens - 1) / Σ ITL, median over runs. distinct tok: each sequence's distinct "
    "generated ids / new tokens over the measured requests, mean over runs (1 / new tokens "
    "for a decoder repeating one token).")


def _col(m: Metric, key: str | None = None) -> Column:
    return Column(key or m.name, m.header, Role.VALUE, m.unit, detail=m.detail, ms=m.ms)


def columns(var: identity.Variation | None = None,
            more: tuple[str, ...] = (), models: Sequence[str] = (),
            modes: Collection[str] = ()) -> tuple[Column, ...]:
    """Key columns (``var``'s varying fields after precision; a ``unit`` column when
    ``models`` mix transformers and others), then runs, time with its CI, the other
    metrics (and ``more``: convergence or latency metrics some configuration has), status
    and flags. Headers say tokens where every model is a transformer, and a set of serve
    runs' times what they are (``median e2e s``)."""
    extra = var.without(*identity.ROW_KEYS).columns() if var else ()
    if tokens.labels_rows(None, models):
        extra = (*extra, Column(tokens.UNIT_COLUMN, "unit", Role.KEY))
    cols = [*KEYS, *extra, Column("runs", "runs", Role.VALUE, "1"),
            _col(metric("time").of_modes(modes))]
    cols += [Column("ci_low_s", "CI95 low s", Role.VALUE, "s"),
             Column("ci_high_s", "CI95 high s", Role.VALUE, "s")]
    cols += [_col(tokens.metric_for(name, models, modes)) for name in (*SUMMARY[1:], *more)]
    cols += [Column("status", "status", Role.KEY), Column("flags", "flags", Role.KEY),
             Column("readings", "readings", Role.KEY)]
    return tuple(cols)


def readings_text(res: ConfigResult) -> str:
    """``120 GPU / 24 host``: the fewest readings behind the configuration's GPU and host
    figures over its runs (docs/metrics.md); empty where none were counted."""
    groups = (("GPU", True), ("host", False)) if res.device_kind == "gpu" else (("host", False),)
    counts = [(what, dict(readings_check(res, gpu)[1])["readings"]) for what, gpu in groups]
    return " / ".join(f"{n} {what}" for what, n in counts if n is not None)


def flags(res: ConfigResult) -> list[str]:
    """``noisy``, ``packed``, ``shared``, ``contaminated``, ``client-bound``, ``simulated``,
    ``oversubscribed``, ``incomplete``, in order."""
    # A CPU run on a host of simulated GPUs is flagged too (its stored GPU rows are
    # simulated, and the export's note counts it), but none of its figures is a GPU one.
    simulated = res.device_kind == "gpu" and any(r.simulated for r in res.runs)
    out = [name for name, on in (("noisy", res.noisy), ("packed", res.packed),
                                 ("shared", res.shared),
                                 ("contaminated", res.contaminated),
                                 ("client-bound", res.client_bound),
                                 ("simulated", simulated),
                                 (oversub.FLAG, res.oversubscribed))
           if on]
    out += [f"{MIXED_FLAG} ({v})" for v in res.versions]
    if res.incomplete:
        out.append("incomplete")
    return out


def ci_or_reason(res: ConfigResult) -> tuple[tuple[float, float] | None, str]:
    """The 95 % bootstrap interval of the median s/iter, or ``None`` and what its cells
    say instead: empty without an ok run, else ``n/a`` and why (never a zero-width
    interval made of one iteration, never an exception for rows an old database left)."""
    return intervals([res])[0]


ONE_RUN = "n/a: one run"
"""The CI cells of a configuration with a single ok run (docs/metrics.md says why)."""


def _why_not(res: ConfigResult) -> str | None:
    """Why ``res`` has no interval (``""``: no ok run), or None when it has one."""
    runs = [r.iterations for r in res.runs]
    if not runs:
        return ""
    if any(not r for r in runs):
        return "n/a: no iterations"
    if not all(all(map(math.isfinite, seconds_of(r))) for r in runs):
        return "n/a: non-finite iteration times"
    if any(len(r) < 2 for r in runs):
        return "n/a: a run with 1 iteration"
    if len(runs) < 2:
        # The interval is of the median over runs: one run's iterations say how precisely
        # that run was timed, not where a second run would land (run-to-run spread is
        # often the larger: two repeats at 0.2 and 0.4 s), so one run gets none.
        return ONE_RUN
    return None


def intervals(results: Sequence[ConfigResult],
              ) -> list[tuple[tuple[float, float] | None, str]]:
    """:func:`ci_or_reason` of each configuration, the intervals computed together
    (:func:`dltop.results.bootstrap_batch.median_cis`)."""
    whys = [_why_not(r) for r in results]
    valid = [k for k, why in enumerate(whys) if why is None]
    found = bootstrap_batch.median_cis([[r.iterations for r in results[k].runs] for k in valid])
    out: list[tuple[tuple[float, float] | None, str]] = [(None, why or "") for why in whys]
    for k, interval in zip(valid, found, strict=True):
        out[k] = (interval, "")
    return out


def within_run(iterations: Sequence[tuple[float, int]]) -> dict[str, Any]:
    """A single run's spread, labelled as its own (docs/metrics.md, statistics policy):
    the p10 and p90 of its measured iterations' seconds (``None`` from fewer than 10),
    never an interval across repeats."""
    ordered = sorted(seconds_of(iterations))
    return {"what": "within-run p10-p90 of one run's measured s/iter, not an interval "
                    "across repeats", "n": len(ordered),
            "p10_s": percentile_or_none(ordered, 10.0),
            "p90_s": percentile_or_none(ordered, 90.0)}


def shown_extras(results: Sequence[ConfigResult]) -> tuple[str, ...]:
    """The convergence and latency metrics that some configuration has a value of: only
    those get a column, so a campaign of timed training runs keeps its usual table."""
    some = [r for r in results if may_have_value(r)]
    return tuple(name for name in CONVERGENCE
                 if any(value_of(r, name).value is not None for r in some))


def _row(res: ConfigResult, var: identity.Variation, device: str,
         more: tuple[str, ...] = (), per_row: bool = False,
         interval: tuple[tuple[float, float] | None, str] | None = None) -> Row:
    reasons: dict[str, str] = {}
    unit = (key_cell(tokens.TOKENS if tokens.is_lm(res.model) else tokens.SAMPLES),) \
        if per_row else ()
    cells: list[Cell | None] = [
        key_cell(res.model), key_cell(res.framework), key_cell(res.batch_size),
        key_cell(device), *identity.row_key_cells(res.identity), *var.cells(res.identity), *unit,
        Cell(f"{res.n_runs}/{res.repeats}", res.n_runs, res.status)]
    extra: dict[str, Any] = {"repeats": res.repeats, "identity": dict(res.identity),
                             "host": res.host, "gpu_name": res.gpu_name}
    simulated: dict[str, float] = {}
    details: dict[str, dict[str, float | str | None]] = {}
    for i, name in enumerate((*SUMMARY, *more)):
        m = metric(name)
        val = value_of(res, name)
        if val.value is None:
            reasons[name] = val.reason
        elif name in more and val.extra:
            # beside a null p99, why (CSV's status says "ok; p99 n/a: n=20")
            details[name] = {**dict(val.extra), **({"note": val.reason} if val.reason else {})}
        if m.detail == READINGS and val.extra:  # the readings behind it, n/a or not
            details[name] = dict(val.extra)
        if val.simulated_value is not None:
            simulated[name] = val.simulated_value
        # without an ok run the median cell names the status; the rest stay blank
        text = val.text(m) if res.runs or i == 0 else ""
        cells.append(Cell(text, val.value, res.status, dict(val.extra),
                          val.reason if val.value is not None else "") if m.detail
                     else Cell(text, val.value, res.status))
        if i == 0:
            bounds, why = ci_or_reason(res) if interval is None else interval
            for bound in (0, 1):
                number = None if bounds is None else bounds[bound]
                text = fmt_seconds(number) if number is not None else why
                cells.append(Cell(text, number, res.status))
            if why:
                reasons["ci_low_s"] = reasons["ci_high_s"] = why
    cells += [Cell(res.status, None, res.status), Cell(", ".join(flags(res))),
              Cell(readings_text(res) if res.runs else "")]
    extra["reasons"] = reasons
    if len(res.runs) == 1 and res.runs[0].iterations:
        extra["within_run"] = within_run(res.runs[0].iterations)
    if details:  # percentiles' p90/p99 and their n (the cell's number is p50); readings
        extra["detail"] = details
    if simulated:
        extra["simulated_values"] = simulated
    return Row(tuple(cells), extra)


def summary_table(db: sqlite_utils.Database,
                  campaigns: int | Sequence[queries.CampaignRow]) -> Table:
    """The summary table of a campaign (an id) or of several (resolved campaigns).

    Where the set spans hosts or GPU models, the device cell names them as the
    pivot's columns do (``hostA cpu:16``).

    Raises:
        UserError: no such campaign.
    """
    with gc_paused():  # its cells and rows are millions of objects, none in a cycle
        return _summary_table(db, campaigns)


def _summary_table(db: sqlite_utils.Database,
                   campaigns: int | Sequence[queries.CampaignRow]) -> Table:
    camps = [queries.resolve_campaign(db, campaigns)] if isinstance(campaigns, int) \
        else list(campaigns)
    results = config_results(db, [c.id for c in camps])
    var = identity.variation(placed_identities(results))
    label = place_labeller(results)
    results.sort(key=lambda r: (
        rank(r.model, catalog.MODELS), rank(r.framework, catalog.FRAMEWORKS), r.batch_size,
        r.host, device_key(r.device), r.gpu_name or "",
        *(identity.sort_value(r.identity.get(name)) for name in identity.ROW_KEYS),
        var.sort_key(r.identity), r.config_key))
    row_var = var.without(*identity.ROW_KEYS)
    more = shown_extras(results)
    what = "summary per configuration"
    models = list(dict.fromkeys(r.model for r in results))  # each once: headers ask per column
    per_row = tokens.labels_rows(None, models)
    lm_note = tokens.note(models)
    lines, meta = caption.context(db, camps, var.caption())
    lines = (*lines, *oversub.caption_lines(results))
    cis = intervals(results)
    modes = identity.modes(r.identity for r in results)
    cols = columns(var, more, models, modes)
    rows = tuple(_row(r, row_var, label(r), more, per_row, ci_r)
                 for r, ci_r in zip(results, cis, strict=True))
    notes = (NOTES + (readings.NOTE,)
             + ((GENERATION_NOTE,) if set(more) & set(GENERATION) else ())
             + ((SERVING_NOTE,) if any(r.identity.get("mode") == "serve" for r in results)
                else ())
             + (() if lm_note is None else (lm_note,)))
    refs = references.stored_references(db, [c.id for c in camps])
    if refs:  # the column only where some configuration has a reference (docs/cluster.md)
        verdicts = references.by_config(references.verdicts(results, refs, cis))
        cols = (*cols, Column("reference", "reference", Role.KEY))
        rows = tuple(Row((*row.cells, Cell(references.cell_text(verdicts[r.config_key]))),
                         row.extra) for r, row in zip(results, rows, strict=True))
        notes = (*notes, references.NOTE)
    table = Table(
        title=caption.title(camps, what), comment=caption.comment(camps, what),
        columns=cols, rows=rows, notes=notes,
        caption=lines,
        meta={**meta, "table": "summary",
              "units": {c.key: c.unit for c in columns(more=more, models=models, modes=modes)
                        if c.unit},
              "identity": var.as_json()})
    other = of_other_modes(results)
    if not other:
        return table
    picked = pick_columns(table, [c.key for c in cols if c.key not in other])
    return replace(picked, notes=tuple(n for n in picked.notes
                                       if not (n == FLOPS_NOTE and "tflops" in other)))


def of_other_modes(results: Sequence[ConfigResult]) -> set[str]:
    """The summary metrics and row keys of other modes than every configuration's
    (``modes`` of the metric or the setting): a set of serve runs has no TFLOP/s, MFU or
    precision column."""
    modes = identity.modes(r.identity for r in results)
    if not modes:
        return set()
    return {name for name in SUMMARY if not modes & set(metric(name).modes)} \
        | identity.row_keys_of_other_modes(modes)
