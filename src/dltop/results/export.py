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
so two configurations never share a cell; the constant ones are a footnote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlite_utils

from dltop import catalog
from dltop.errors import UserError
from dltop.results import identity, queries, scaling, summary
from dltop.results.aggregate import ConfigResult, config_results, device_key, rank
from dltop.results.metrics import METRICS as METRIC_SPECS
from dltop.results.metrics import markers, value_of
from dltop.results.render import FORMATS, latex_escape, render
from dltop.results.table import (
    Cell,
    Column,
    Layout,
    Role,
    Row,
    Table,
    key_cell,
)
from dltop.telemetry.contamination import CPU_FOREIGN_THRESHOLD_PCT

__all__ = ["FORMATS", "METRICS", "SUFFIXES", "TABLES", "build_table", "export_to_file",
           "format_for_path", "latex_escape", "render", "results_table"]

METRICS = tuple(METRIC_SPECS)
"""``dltop export --metric`` choices: ``time`` (the default), ``mean-time``, ..."""
TABLES = ("pivot", "summary", "scaling")
SUFFIXES = {".md": "md", ".csv": "csv", ".json": "json", ".tex": "latex"}
"""File suffix → format, for exports that name only a path."""

NOTE_CELLS = ("Cells: median over repeats of each run's median (warm-up excluded). "
              "`*` noisy (a run's CV > 0.10); OOM out of memory; n/a not supported or not "
              "available on this host; failed: the runner crashed.")
NOTE_METRIC = ("Cells: {how} over the ok repeats (warm-up iterations excluded). "
               "`*` noisy (a run's CV > 0.10); OOM out of memory; n/a not supported, not "
               "available on this host or not measured (the reason follows); failed: the "
               "runner crashed; simulated: read from simulated GPUs.")
HOW = {"time": "median of each run's median", "throughput": "median of each run's "
       "total samples / total seconds", "gpu-memory": "maximum of each run's peak",
       "host-memory": "maximum of each run's peak", "tflops": "FLOPs per sample × the "
       "throughput cell", "mfu": "TFLOP/s ÷ the devices' peak for the precision"}
NOTE_CONTAMINATED = ("§ contaminated: a process outside the run used its GPUs, or more than "
                     f"{CPU_FOREIGN_THRESHOLD_PCT:g} % of its pinned CPUs, while it was measured "
                     "(runs.contamination says which).")
NOTE_PACKED = ("† measured while other runs shared the host (a packed campaign, "
               "dltop run --pack): a throughput figure, not a clean single-run one.")
NOTE_SIMULATED = ("Device telemetry of this campaign came from SIMULATED GPUs "
                  "(--fake-gpus): not real hardware.")


def _cell(res: ConfigResult, metric: str) -> Cell:
    """The metric's text with its markers, or why there is no value."""
    val = value_of(res, metric)
    text = val.text(METRIC_SPECS[metric])
    if val.value is not None:
        text += markers(res, metric)
    detail: dict[str, object] = {"n_runs": res.n_runs, "repeats": res.repeats,
                                 "spread_s": res.spread_s, "noisy": res.noisy,
                                 "packed": res.packed}
    if res.contaminated:
        detail["contaminated"] = True
    if val.simulated_value is not None:
        detail["simulated_value"] = val.simulated_value
    if val.source:
        detail["source"] = val.source
    return Cell(text, val.value, res.status, detail)


def _simulated(db: sqlite_utils.Database, campaign_id: int) -> bool:
    if "gpu_samples" not in db.table_names():
        return False
    return bool(next(db.query(
        "select count(*) as n from gpu_samples g join runs r on r.id = g.run_id "
        "where r.campaign_id = ? and g.simulated = 1", [campaign_id]))["n"])


def build_table(db: sqlite_utils.Database, campaign_id: int, metric: str) -> Table:
    """Pivot a campaign's configuration results: one row per model, framework and batch.

    Raises:
        UserError: ``metric`` is not one of :data:`METRICS`, or no such campaign.
    """
    if metric not in METRICS:
        raise UserError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    camp = queries.resolve_campaign(db, campaign_id)
    results = config_results(db, campaign_id)
    var = identity.variation(r.identity for r in results)
    devices = sorted({r.device for r in results}, key=device_key)
    by_row: dict[tuple[str, str, int, str], dict[str, ConfigResult]] = {}
    for r in results:
        cells = by_row.setdefault((r.model, r.framework, r.batch_size,
                                   var.group(r.identity)), {})
        if r.device in cells:  # cannot happen: the row key holds every varying field
            raise RuntimeError(f"two configurations in one cell: {r.config_key}")
        cells[r.device] = r

    def order(k: tuple[str, str, int, str]) -> tuple[Any, ...]:
        some = next(iter(by_row[k].values())).identity
        return (rank(k[0], catalog.MODELS), rank(k[1], catalog.FRAMEWORKS), k[2],
                var.sort_key(some), k)

    rows: list[Row] = []
    for k in sorted(by_row, key=order):
        model, framework, batch, _ = k
        values = [by_row[k].get(d) for d in devices]
        some = next(iter(by_row[k].values())).identity
        rows.append(Row((key_cell(model), key_cell(framework), key_cell(batch),
                         *var.cells(some),
                         *(None if v is None else _cell(v, metric) for v in values))))
    spec = METRIC_SPECS[metric]
    unit, unit_short = spec.title, spec.unit
    columns = (Column("model", "model", Role.KEY, latex_header="Model"),
               Column("framework", "framework", Role.KEY, latex_header="Framework"),
               Column("batch", "batch", Role.KEY, latex_header="Batch"),
               *var.columns(),
               *(Column(d, d, Role.VALUE, unit_short) for d in devices))
    simulated = _simulated(db, campaign_id)
    notes = [NOTE_CELLS if metric == "time" else NOTE_METRIC.format(
        how=HOW.get(metric, "mean of each run's value"))]
    if any(r.packed for r in results):  # only ok results are ever packed
        notes.append(NOTE_PACKED)
    if any(r.contaminated for r in results):
        notes.append(NOTE_CONTAMINATED)
    if simulated:
        notes.append(NOTE_SIMULATED)
    caption = var.caption()
    if caption:
        notes.append(caption)
    return Table(
        title=f"Campaign {camp.id} `{camp.name}` ({camp.status}, {camp.created_at}): {unit}",
        comment=f"dltop campaign {camp.id} ({camp.name}): {unit}"
                + (f"; {caption}" if caption else ""),
        columns=columns, rows=tuple(rows), notes=tuple(notes), layout=Layout.PIVOT,
        meta={"campaign": {"id": camp.id, "name": camp.name, "status": camp.status,
                           "created_at": camp.created_at, "host": camp.host},
              "metric": metric, "unit": unit, "simulated_telemetry": simulated,
              "identity": var.as_json()})


def results_table(db: sqlite_utils.Database, campaign_id: int, table: str = "pivot",
                  metric: str = "time") -> Table:
    """The ``pivot`` (of ``metric``), ``summary`` or ``scaling`` table of a campaign.

    Raises:
        UserError: unknown ``table`` or ``metric``, or no such campaign.
    """
    if table == "scaling":
        camp = queries.resolve_campaign(db, campaign_id)
        return scaling.scaling_table(scaling.scaling_rows(db, camp.id),
                                     f"Campaign {camp.id} `{camp.name}` ({camp.status}): "
                                     "scaling")
    if table == "summary":
        return summary.summary_table(db, campaign_id)
    if table != "pivot":
        raise UserError(f"unknown table {table!r}: use one of {', '.join(TABLES)}")
    return build_table(db, campaign_id, metric)


def format_for_path(path: str, default: str | None = None) -> str:
    """The format a file's suffix names (``.md .csv .json .tex``), else ``default``.

    Raises:
        UserError: an unknown suffix and no default.
    """
    fmt = SUFFIXES.get(Path(path).suffix.lower(), default)
    if fmt is None:
        raise UserError(f"{path}: unknown format (use one of {', '.join(SUFFIXES)})")
    return fmt


def export_to_file(db: sqlite_utils.Database, campaign_id: int, path: str, *,
                   fmt: str | None = None, table: str = "pivot",
                   metric: str = "time") -> str:
    """Write a campaign's results table to ``path``; a ``wrote PATH`` message.

    Args:
        fmt: the format; ``None`` takes it from the suffix of ``path``.
        table: ``pivot``, ``summary`` or ``scaling``.
        metric: one of :data:`METRICS` (the pivot's cells).

    Raises:
        UserError: no such campaign, an unknown table, metric or suffix, or the file
            cannot be written (nothing is written then).
    """
    text = render(results_table(db, campaign_id, table, metric), fmt or format_for_path(path))
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror}") from None
    return f"wrote {path}"
