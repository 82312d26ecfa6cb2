"""The paper's table: model × framework × batch (× varying settings) rows, device columns.

Cells hold one metric of :mod:`dltop.results.metrics` (median seconds per
mini-batch by default, samples per second, power, energy, memory, CPU,
TFLOP/s, MFU) of a configuration over its repeats; a cell with no value says
why (``OOM``, ``n/a: no GPU``, ``simulated``, ``timeout``, ...). The table is a
:class:`~dltop.results.table.Table`; :mod:`dltop.results.render` draws it as
Markdown, CSV, JSON or LaTeX. :func:`export_to_file` is the one way to write
any results table to a file (the CLI's ``export -o`` and the TUI's ``e``).

Rows are keyed by model, framework, batch and every other identity field that
varies in the campaign (:mod:`dltop.results.identity`: precision, lr, an option...),
so two configurations never share a cell; the constant ones are in the caption
with the environment (:mod:`dltop.results.caption`). A table may span several
campaigns: when they ran on several hosts or GPU models, the column key names
the host and the GPU (``hostA cpu:16``, ``hostB gpu:1 (H100)``), and a
configuration is the same (its jobs merge as repeats) only with the same
identity on the same host and GPU model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop import catalog
from dltop.errors import UserError
from dltop.results import (
    caption,
    identity,
    lmcost,
    overhead,
    oversub,
    profile,
    queries,
    scaling,
    slo,
    summary,
    tokens,
)
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.gcpause import gc_paused
from dltop.results.metricdefs import BY_FLOPS, HOST_SPLIT, READINGS
from dltop.results.metricdefs import METRICS as METRIC_SPECS
from dltop.results.metricdefs import metric as metric_spec
from dltop.results.metrics import MIXED_NOTE, host_split_text, markers, value_of
from dltop.results.places import place_key, place_labeller, placed_identities, rank
from dltop.results.render import render
from dltop.results.table import (
    NOTE_INCOMPLETE,
    Cell,
    Column,
    Layout,
    Role,
    Row,
    Table,
    key_cell,
    pick_columns,
    pick_rows,
)
from dltop.store.read.runs import any_simulated
from dltop.telemetry import readings
from dltop.telemetry.contamination import CPU_FOREIGN_THRESHOLD_PCT

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

METRICS = tuple(METRIC_SPECS)
"""``dltop export --metric`` choices: ``time`` (the default), ``mean-time``, ..."""
PIVOT_METRICS = (*METRICS, *(m.name for m in BY_FLOPS))
"""What a pivot's cells may hold: :data:`METRICS`, and TFLOP/s and MFU by the other FLOPs
convention (``--flops no-embedding``)."""
TABLES = ("pivot", "summary", "scaling", "profile", "slo", "overhead")
"""``dltop export --table`` choices (``profile`` takes ``--run N`` instead of campaigns)."""
SUFFIXES = {".md": "md", ".csv": "csv", ".json": "json", ".tex": "latex"}
"""File suffix → format, for exports that name only a path."""

NOTE_CELLS = ("Cells: median over repeats of each run's median (warm-up excluded). "
              "`*` noisy (a run's CV > 0.10); OOM out of memory; n/a not supported or not "
              "available on this host; failed: the runner crashed.")
NOTE_METRIC = ("Cells: {how} over the ok repeats (warm-up iterations excluded). "
               "`*` noisy (a run's CV > 0.10); OOM out of memory; n/a not supported, not "
               "available on this host or not measured (the reason follows); failed: the "
               "runner crashed; simulated: read from simulated GPUs.")
NOTE_CONTAMINATED = ("§ contaminated: a process outside the run used its GPUs, or more than "
                     f"{CPU_FOREIGN_THRESHOLD_PCT:g} % of its pinned CPUs, while it was measured "
                     "(runs.contamination says which).")
NOTE_CLIENT_BOUND = ("‡ client-bound: a serve run's client could not keep its schedule "
                     "(dispatch lag p99 over 10 ms, or its CPU over 90 % of a core): the "
                     "figures measure the client as much as the server (docs/serving.md).")
NOTE_PACKED = ("† measured while other runs shared its devices: packed (its campaign ran "
               "with dltop run --pack) or shared (another engine's runner was seen on "
               "them): a throughput figure, not a clean single-run one.")
NOTE_STATUSES = (("timeout", "timeout: stopped at its timeout_s"),
                 ("cancelled", "cancelled: stopped or dropped by a cancel"),
                 ("diverged", "diverged: the loss became NaN or infinite"),
                 ("short", "short n/m: the program ended after n of the m measured "
                           "iterations asked"),
                 ("setup failed", "setup failed: its Slurm setup line failed, the runner "
                                  "never started"))
"""The other cells without a number (docs/metrics.md, "Cells without a number"): each
explained under a pivot that has one."""
NOTE_PENDING = "`-` no result yet: its runs are queued or running."
NOTE_EMPTY = "An empty cell: no such configuration in these campaigns."
NOTE_SIMULATED = ("Device telemetry of this campaign came from SIMULATED GPUs "
                  "(--fake-gpus): not real hardware.")


def _cell(res: ConfigResult, metric: str) -> Cell:
    """The metric's text with its markers, or why there is no value."""
    val = value_of(res, metric)
    text = val.text(metric_spec(metric))
    if val.value is not None:
        text += markers(res, metric)
        if res.incomplete:
            text += f" ({res.n_runs}/{res.repeats})"
        if metric == "cpu" and (split := host_split_text(res)):
            text += f" ({split})"
        if (n := dict(val.extra).get("readings")) is not None \
                and metric_spec(metric).detail == READINGS:
            text += f" ({n:.0f} readings)"  # the fewest of its runs (docs/metrics.md)
    detail: dict[str, object] = {"n_runs": res.n_runs, "repeats": res.repeats,
                                 "spread_s": res.spread_s, "noisy": res.noisy,
                                 "packed": res.packed}
    detail.update({flag: True for flag in ("incomplete", "shared", "contaminated",
                                           "client_bound", "oversubscribed")
                   if getattr(res, flag)})
    if res.versions:
        detail["mixed_versions"] = True
        detail["versions"] = list(res.versions)
    if val.simulated_value is not None:
        detail["simulated_value"] = val.simulated_value
    if val.source:
        detail["source"] = val.source
    detail.update(val.extra)
    if metric == "cpu":
        detail.update({col: value_of(res, name).value for name, col in HOST_SPLIT.items()})
    return Cell(text, val.value, res.status, detail)


def campaigns_of(db: sqlite_utils.Database,
                 campaigns: int | str | Sequence[int]) -> list[queries.CampaignRow]:
    """The campaigns a table covers: an id, ids, or a ``--campaign`` reference
    (:func:`dltop.results.queries.resolve_campaigns`).

    Raises:
        UserError: a campaign that does not exist.
    """
    if isinstance(campaigns, int | str):
        return queries.resolve_campaigns(db, campaigns)
    return queries.resolve_campaigns(db, ",".join(str(i) for i in campaigns))


def build_table(db: sqlite_utils.Database, campaigns: int | str | Sequence[int],
                metric: str, *, results: Sequence[ConfigResult] | None = None) -> Table:
    """Pivot the configuration results of one or several campaigns: one row per model,
    framework, batch and varying identity field, one column per device (and host and GPU
    model, where the set spans several).

    ``results``: these campaigns' :func:`config_results`, when the caller read them
    already (they do not depend on the metric; 2 s at 100 000 jobs).

    Raises:
        UserError: ``metric`` is not one of :data:`METRICS`, or no such campaign.
    """
    if metric not in PIVOT_METRICS:
        raise UserError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    camps = campaigns_of(db, campaigns)
    ids = [c.id for c in camps]
    if results is None:
        results = config_results(db, ids)
    var = identity.variation(placed_identities(results))
    label = place_labeller(results)
    firsts: dict[str, ConfigResult] = {}
    for r in sorted(results, key=place_key):
        firsts.setdefault(label(r), r)
    devices = list(firsts)
    by_row: dict[tuple[str, str, int, str], dict[str, ConfigResult]] = {}
    for r in results:
        cells = by_row.setdefault((r.model, r.framework, r.batch_size,
                                   var.group(r.identity)), {})
        if label(r) in cells:  # cannot happen: the row key holds every varying field
            raise RuntimeError(f"two configurations in one cell: {r.config_key}")
        cells[label(r)] = r

    def order(k: tuple[str, str, int, str]) -> tuple[Any, ...]:
        some = next(iter(by_row[k].values())).identity
        return (rank(k[0], catalog.MODELS), rank(k[1], catalog.FRAMEWORKS), k[2],
                var.sort_key(some), k)

    models = {r.model for r in results}
    # Transformer rows count tokens: one unit for every row, or each row's own.
    per_row = tokens.labels_rows(metric, models)
    rows: list[Row] = []
    for k in sorted(by_row, key=order):
        model, framework, batch, _ = k
        values = [by_row[k].get(d) for d in devices]
        some = next(iter(by_row[k].values())).identity
        unit_cell = (key_cell(tokens.row_unit(metric, model)),) if per_row else ()
        rows.append(Row((key_cell(model), key_cell(framework), key_cell(batch),
                         *var.cells(some), *unit_cell,
                         *(None if v is None else _cell(v, metric) for v in values))))
    spec = tokens.metric_for(metric, models, identity.modes(r.identity for r in results))
    unit, unit_short = spec.title, spec.unit
    unit_col = (Column(tokens.UNIT_COLUMN, "unit", Role.KEY),) if per_row else ()
    columns = (Column("model", "model", Role.KEY, latex_header="Model"),
               Column("framework", "framework", Role.KEY, latex_header="Framework"),
               Column("batch", "batch", Role.KEY, latex_header="Batch"),
               *var.columns(), *unit_col,
               *(Column(d, d, Role.VALUE, unit_short, detail=spec.detail, ms=spec.ms)
                 for d in devices))
    simulated = any_simulated(db, ids)
    notes = [NOTE_CELLS if metric == "time" else NOTE_METRIC.format(how=spec.how)]
    if spec.detail == READINGS:
        notes.append(readings.NOTE)
    if metric.split("-")[0] in ("tflops", "mfu"):  # the FLOPs they count (docs/metrics.md)
        notes.append(lmcost.CONVENTION_NOTE[lmcost.NO_EMBEDDING if metric.endswith(
            lmcost.NO_EMBEDDING) else lmcost.NANOGPT] + ".")
    if any(r.incomplete and r.n_runs for r in results):
        notes.append(NOTE_INCOMPLETE)
    # the cells without a number that no other note names
    shown = [c for row in rows for c in row.cells[len(columns) - len(devices):]]
    if any(c is not None and c.value is None and c.text == "-" for c in shown):
        notes.append(NOTE_PENDING)
    if any(c is None for c in shown):
        notes.append(NOTE_EMPTY)
    missing = {c.text for c in shown if c is not None and c.value is None}
    said = [why for label, why in NOTE_STATUSES
            if any(text == label or text.startswith(f"{label} ") for text in missing)]
    if said:
        notes.append("; ".join(said) + ".")
    if any(r.packed or r.shared for r in results):  # only ok results ever are
        notes.append(NOTE_PACKED)
    if any(r.contaminated for r in results):
        notes.append(NOTE_CONTAMINATED)
    if any(r.client_bound for r in results):
        notes.append(NOTE_CLIENT_BOUND)
    if any(r.oversubscribed for r in results):
        notes.append(oversub.NOTE)
    if any(r.versions for r in results):
        notes.append(MIXED_NOTE)
    if simulated:
        notes.append(NOTE_SIMULATED)
    if (lm_note := tokens.note(models)) is not None:
        notes.append(lm_note)
    lines, meta = caption.context(db, camps, var.caption())
    lines = (*lines, *oversub.caption_lines(results))
    return Table(
        title=caption.title(camps, unit), comment=caption.comment(camps, unit),
        columns=columns, rows=tuple(rows), notes=tuple(notes), caption=lines,
        layout=Layout.PIVOT,
        meta={**meta, "metric": metric, "unit": unit, "simulated_telemetry": simulated,
              "identity": var.as_json()})


def results_table(db: sqlite_utils.Database, campaigns: int | str | Sequence[int],
                  table: str = "pivot", metric: str = "time", run: int | None = None,
                  attainment: float = slo.DEFAULT_ATTAINMENT) -> Table:
    """The ``pivot`` (of ``metric``), ``summary``, ``scaling``, ``slo`` (at SLO
    ``attainment``) or ``overhead`` table of one or several campaigns (ids, or a
    ``--campaign`` reference such as ``3,5``, ``all``, a name), or the ``profile`` table
    of run ``run`` (campaigns are not read then).

    Raises:
        UserError: unknown ``table`` or ``metric``, no such campaign or run, ``profile``
            without ``run`` or a run without a profile, ``slo`` without a rate sweep of
            serve runs with an SLO (:func:`dltop.results.slo.answers`), ``overhead``
            without a serve run paired with a generate run
            (:func:`dltop.results.overhead.pairs`).
    """
    if table == "profile":
        if run is None:
            raise UserError("--table profile shows one run's operators: give --run N")
        return profile.profile_table(db, run)
    if table == "scaling":
        return scaling.campaigns_scaling_table(db, campaigns_of(db, campaigns))
    if table == "summary":
        return summary.summary_table(db, campaigns_of(db, campaigns))
    if table == "slo":
        return slo.slo_table(db, campaigns_of(db, campaigns), attainment)
    if table == "overhead":
        return overhead.overhead_table(db, campaigns_of(db, campaigns))
    if table != "pivot":
        raise UserError(f"unknown table {table!r}: use one of {', '.join(TABLES)}")
    return build_table(db, campaigns, metric)


def results_text(db: sqlite_utils.Database, campaigns: int | str | Sequence[int], fmt: str,
                 table: str = "pivot", metric: str = "time", run: int | None = None,
                 columns: Sequence[str] = (), where: Sequence[str] = (),
                 attainment: float = slo.DEFAULT_ATTAINMENT) -> str:
    """:func:`results_table` drawn as ``fmt`` (``md``, ``csv``, ``json``, ``latex``), with
    only ``columns`` (headers or keys, in that order) when some are named, and only the
    rows ``where`` selects (``model=resnet-50``: :func:`dltop.results.table.pick_rows`).

    Built and drawn with the cyclic garbage collector paused
    (:mod:`dltop.results.gcpause`): a 10 000-row table's cells, none in a cycle, are
    freed before it runs again instead of scanned by it (about 1.5 s of a
    10 000-configuration summary's 9).

    Raises:
        UserError: as :func:`results_table`, campaigns without a job (no runs yet), or
            a column the table does not have.
        ValueError: an unknown format.
    """
    with gc_paused():
        built = results_table(db, campaigns, table, metric, run, attainment)
        if not built.rows and table != "profile":
            # a header-only table reads as a result; say so, as an empty database does
            raise UserError(f"{built.title.rpartition(': ')[0]}: no runs yet (no job "
                            "stored: nothing to show)")
        if where:
            try:
                built = pick_rows(built, where)
            except ValueError as exc:
                raise UserError(f"--where {exc}") from None
        if columns:
            try:
                built = pick_columns(built, columns)
            except ValueError as exc:
                raise UserError(f"--columns: {exc}") from None
        return render(built, fmt, every_column=bool(columns))


def format_for_path(path: str, default: str | None = None) -> str:
    """The format a file's suffix names (``.md .csv .json .tex``), else ``default``.

    Raises:
        UserError: an unknown suffix and no default.
    """
    fmt = SUFFIXES.get(Path(path).suffix.lower(), default)
    if fmt is None:
        raise UserError(f"{path}: unknown format (use one of {', '.join(SUFFIXES)})")
    return fmt


def export_to_file(db: sqlite_utils.Database, campaigns: int | str | Sequence[int],
                   path: str, *,
                   fmt: str | None = None, table: str = "pivot",
                   metric: str = "time", run: int | None = None,
                   columns: Sequence[str] = (), where: Sequence[str] = (),
                   attainment: float = slo.DEFAULT_ATTAINMENT) -> str:
    """Write the results table of one or several campaigns to ``path`` (UTF-8, whatever
    the locale); ``wrote PATH``.

    Args:
        fmt: the format; ``None`` takes it from the suffix of ``path``.
        table: ``pivot``, ``summary``, ``scaling``, ``profile``, ``slo`` or ``overhead``.
        metric: one of :data:`METRICS` (the pivot's cells).
        run: the run of a ``profile`` table.
        columns: only these columns (:func:`dltop.results.table.pick_columns`).
        where: only these rows (:func:`dltop.results.table.pick_rows`).
        attainment: the share of requests meeting the SLOs of the ``slo`` table.

    Raises:
        UserError: no such campaign, an unknown table, metric or suffix, or the file
            cannot be written (nothing is written then).
    """
    text = results_text(db, campaigns, fmt or format_for_path(path), table, metric, run,
                        columns, where, attainment)
    try:
        Path(path).write_text(text, encoding="utf-8")  # not the locale's: LANG=C is ASCII
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror}") from None
    return f"wrote {path}"
