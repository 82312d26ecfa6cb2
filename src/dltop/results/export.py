"""The paper's table: model × framework × batch rows, device-configuration columns.

Cells hold the median seconds per mini-batch (``time``) or samples per second
(``throughput``) of a configuration over its repeats; a cell with no ok run
shows why (``OOM``, ``n/a``, ``timeout``, ``failed``, ...). The table is a
:class:`~dltop.results.table.Table`; :mod:`dltop.results.render` draws it as
Markdown, CSV, JSON or LaTeX. :func:`export_to_file` is the one way to write
any results table to a file (the CLI's ``export -o`` and the TUI's ``e``).
"""

from __future__ import annotations

from pathlib import Path

import sqlite_utils

from dltop import catalog
from dltop.errors import UserError
from dltop.results import queries, scaling
from dltop.results.aggregate import ConfigResult, config_results, rank
from dltop.results.render import FORMATS, latex_escape, render
from dltop.results.table import (
    Cell,
    Column,
    Layout,
    Role,
    Row,
    Table,
    fmt_seconds,
    key_cell,
    status_label,
)
from dltop.telemetry.contamination import CPU_FOREIGN_THRESHOLD_PCT

__all__ = ["FORMATS", "METRICS", "SUFFIXES", "TABLES", "build_table", "export_to_file",
           "format_for_path", "latex_escape", "render", "results_table"]

METRICS = ("time", "throughput")
TABLES = ("summary", "scaling")
SUFFIXES = {".md": "md", ".csv": "csv", ".json": "json", ".tex": "latex"}
"""File suffix → format, for exports that name only a path."""

NOTE_CELLS = ("Cells: median over repeats of each run's median (warm-up excluded). "
              "`*` noisy (a run's CV > 0.10); OOM out of memory; n/a not supported or not "
              "available on this host; failed: the runner crashed.")
NOTE_PACKED = ("† measured while other runs shared the host (a packed campaign, "
               "dltop run --pack): a throughput figure, not a clean single-run one.")
NOTE_CONTAMINATED = ("‡ contaminated: another process used the run's GPUs, or more than "
                     f"{CPU_FOREIGN_THRESHOLD_PCT:g} % of its pinned CPUs, during the measured "
                     "window (runs.contamination says which).")
NOTE_SIMULATED = ("Device telemetry of this campaign came from SIMULATED GPUs "
                  "(--fake-gpus): not real hardware.")
UNITS = {"time": ("median seconds per mini-batch", "s"),
         "throughput": ("samples per second", "samples/s")}


def _device_key(label: str) -> tuple[int, int, str]:
    kind, _, count = label.partition(":")
    order = {"cpu": 0, "cpus": 1, "gpu": 2}.get(kind, 3)
    return (order, int(count) if count.isdigit() else 0, label)


def _cell(res: ConfigResult, metric: str) -> Cell:
    """4 significant digits (time) or 1 decimal (throughput); ``*`` noisy, ``†`` packed,
    ``‡`` contaminated."""
    value = res.median_s if metric == "time" else res.samples_per_s
    if value is None:
        text = status_label(res.status)
    else:
        body = fmt_seconds(value) if metric == "time" else f"{value:.1f}"
        text = (body + ("*" if res.noisy else "") + ("†" if res.packed else "")
                + ("‡" if res.contaminated else ""))
    return Cell(text, value, res.status, {"n_runs": res.n_runs, "spread_s": res.spread_s,
                                          "noisy": res.noisy, "packed": res.packed,
                                          # only when set: clean cells read as before
                                          **({"contaminated": True} if res.contaminated
                                             else {})})


def _simulated(db: sqlite_utils.Database, campaign_id: int) -> bool:
    if "gpu_samples" not in db.table_names():
        return False
    return bool(next(db.query(
        "select count(*) as n from gpu_samples g join runs r on r.id = g.run_id "
        "where r.campaign_id = ? and g.simulated = 1", [campaign_id]))["n"])


def build_table(db: sqlite_utils.Database, campaign_id: int, metric: str) -> Table:
    """Pivot a campaign's configuration results: one row per model, framework and batch.

    Raises:
        ValueError: ``metric`` is not one of :data:`METRICS`.
        UserError: no such campaign.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}")
    camp = queries.resolve_campaign(db, campaign_id)
    results = config_results(db, campaign_id)
    devices = sorted({r.device for r in results}, key=_device_key)
    by_row: dict[tuple[str, str, int], dict[str, ConfigResult]] = {}
    for r in results:
        by_row.setdefault((r.model, r.framework, r.batch_size), {})[r.device] = r
    keys = sorted(by_row, key=lambda k: (rank(k[0], catalog.MODELS),
                                         rank(k[1], catalog.FRAMEWORKS), k[2], k))
    rows: list[Row] = []
    for model, framework, batch in keys:
        values = [by_row[(model, framework, batch)].get(d) for d in devices]
        rows.append(Row((key_cell(model), key_cell(framework), key_cell(batch),
                         *(None if v is None else _cell(v, metric) for v in values))))
    unit, unit_short = UNITS[metric]
    columns = (Column("model", "model", Role.KEY, latex_header="Model"),
               Column("framework", "framework", Role.KEY, latex_header="Framework"),
               Column("batch", "batch", Role.KEY, latex_header="Batch"),
               *(Column(d, d, Role.VALUE, unit_short) for d in devices))
    simulated = _simulated(db, campaign_id)
    notes = [NOTE_CELLS]
    if any(r.packed for r in results):  # only ok results are ever packed
        notes.append(NOTE_PACKED)
    if any(r.contaminated for r in results):
        notes.append(NOTE_CONTAMINATED)
    if simulated:
        notes.append(NOTE_SIMULATED)
    return Table(
        title=f"Campaign {camp.id} `{camp.name}` ({camp.status}, {camp.created_at}): {unit}",
        comment=f"dltop campaign {camp.id} ({camp.name}): {unit}",
        columns=columns, rows=tuple(rows), notes=tuple(notes), layout=Layout.PIVOT,
        meta={"campaign": {"id": camp.id, "name": camp.name, "status": camp.status,
                           "created_at": camp.created_at, "host": camp.host},
              "metric": metric, "unit": unit, "simulated_telemetry": simulated})


def results_table(db: sqlite_utils.Database, campaign_id: int, table: str = "summary",
                  metric: str = "time") -> Table:
    """The ``summary`` pivot (of ``metric``) or the ``scaling`` table of a campaign.

    Raises:
        ValueError: unknown ``table`` or ``metric``.
        UserError: no such campaign.
    """
    if table == "scaling":
        camp = queries.resolve_campaign(db, campaign_id)
        return scaling.scaling_table(scaling.scaling_rows(db, camp.id),
                                     f"Campaign {camp.id} `{camp.name}` ({camp.status}): "
                                     "scaling")
    if table != "summary":
        raise ValueError(f"table must be one of {TABLES}")
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
                   fmt: str | None = None, table: str = "summary",
                   metric: str = "time") -> str:
    """Write a campaign's results table to ``path``; a ``wrote PATH`` message.

    Args:
        fmt: the format; ``None`` takes it from the suffix of ``path``.
        table: ``summary`` or ``scaling``.
        metric: ``time`` or ``throughput`` (the summary table's cells).

    Raises:
        UserError: no such campaign, an unknown suffix, or the file cannot be written.
    """
    text = render(results_table(db, campaign_id, table, metric), fmt or format_for_path(path))
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror}") from None
    return f"wrote {path}"
