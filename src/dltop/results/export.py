"""The paper's table: model × framework × batch rows, device-configuration columns.

Cells hold the median seconds per mini-batch (``time``) or samples per second
(``throughput``) of a configuration over its repeats; a cell with no ok run
shows why (``OOM``, ``n/a``, ``timeout``, ``failed``, ...). Rendered as
Markdown, CSV, JSON or LaTeX.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from dltop import catalog
from dltop.results import queries
from dltop.results.aggregate import ConfigResult, config_results

LABELS = {"oom": "OOM", "unsupported": "n/a", "unsatisfiable": "n/a", "timeout": "timeout",
          "crashed": "failed", "diverged": "diverged", "cancelled": "cancelled",
          "running": "-", "queued": "-"}
METRICS = ("time", "throughput")
FORMATS = ("md", "csv", "json", "latex")


@dataclass(frozen=True)
class Cell:
    """One table cell: a number, or the status that explains its absence."""

    value: float | None
    status: str
    n_runs: int
    spread_s: float | None
    noisy: bool
    packed: bool = False

    def text(self, metric: str) -> str:
        """Display form: 4 significant digits (time) or 1 decimal (throughput).

        ``*`` marks a noisy cell, ``†`` one measured beside other runs (packed).
        """
        if self.value is None:
            return LABELS.get(self.status, self.status)
        body = fmt_seconds(self.value) if metric == "time" else f"{self.value:.1f}"
        return body + ("*" if self.noisy else "") + ("†" if self.packed else "")


def fmt_seconds(value: float) -> str:
    """Seconds with 4 significant digits kept visible: 0.2520, 1.000, 12.35."""
    body = f"{value:#.4g}"
    return body.rstrip(".") if "e" not in body else body


@dataclass(frozen=True)
class Row:
    """model, framework, batch and one cell per column."""

    model: str
    framework: str
    batch_size: int
    cells: tuple[Cell | None, ...]


@dataclass(frozen=True)
class Table:
    """A campaign's results pivoted for export."""

    campaign: queries.CampaignRow
    metric: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    simulated_telemetry: bool = False
    """Some of the campaign's device telemetry came from simulated (fake) GPUs."""


def _device_key(label: str) -> tuple[int, int, str]:
    kind, _, count = label.partition(":")
    order = {"cpu": 0, "cpus": 1, "gpu": 2}.get(kind, 3)
    return (order, int(count) if count.isdigit() else 0, label)


def _rank(value: str, order: tuple[str, ...]) -> int:
    return order.index(value) if value in order else len(order)


def build_table(db: sqlite_utils.Database, campaign_id: int, metric: str) -> Table:
    """Pivot a campaign's configuration results."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}")
    campaign = queries.resolve_campaign(db, campaign_id)
    results = config_results(db, campaign_id)
    columns = tuple(sorted({r.device for r in results}, key=_device_key))
    by_row: dict[tuple[str, str, int], dict[str, ConfigResult]] = {}
    for r in results:
        by_row.setdefault((r.model, r.framework, r.batch_size), {})[r.device] = r
    keys = sorted(by_row, key=lambda k: (_rank(k[0], catalog.MODELS),
                                         _rank(k[1], catalog.FRAMEWORKS), k[2], k))
    rows = []
    for key in keys:
        cells: list[Cell | None] = []
        for col in columns:
            res = by_row[key].get(col)
            if res is None:
                cells.append(None)
                continue
            value = res.median_s if metric == "time" else res.samples_per_s
            cells.append(Cell(value, res.status, res.n_runs, res.spread_s, res.noisy,
                              res.packed))
        rows.append(Row(key[0], key[1], key[2], tuple(cells)))
    simulated = bool(next(db.query(
        "select count(*) as n from gpu_samples g join runs r on r.id = g.run_id "
        "where r.campaign_id = ? and g.simulated = 1", [campaign_id]))["n"]) \
        if "gpu_samples" in db.table_names() else False
    return Table(campaign, metric, columns, tuple(rows), simulated)


def render(table: Table, fmt: str) -> str:
    """The table as ``md``, ``csv``, ``json`` or ``latex`` text."""
    if fmt == "md":
        return _markdown(table)
    if fmt == "csv":
        return _csv(table)
    if fmt == "json":
        return _json(table)
    if fmt == "latex":
        return _latex(table)
    raise ValueError(f"format must be one of {FORMATS}")


def _unit(metric: str) -> str:
    return "median seconds per mini-batch" if metric == "time" else "samples per second"


def _texts(table: Table) -> list[list[str]]:
    return [[r.model, r.framework, str(r.batch_size),
             *[c.text(table.metric) if c else "" for c in r.cells]] for r in table.rows]


def _markdown(table: Table) -> str:
    c = table.campaign
    head = ["model", "framework", "batch", *table.columns]
    lines = [f"Campaign {c.id} `{c.name}` ({c.status}, {c.created_at}): {_unit(table.metric)}",
             "", "| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] * 3 + ["---:"] * len(table.columns)) + "|"]
    lines += ["| " + " | ".join(t) + " |" for t in _texts(table)]
    lines += ["", "Cells: median over repeats of each run's median (warm-up excluded). "
              "`*` noisy (a run's CV > 0.10); OOM out of memory; n/a not supported or not "
              "available on this host; failed: the runner crashed."]
    if any(cell and cell.packed for r in table.rows for cell in r.cells):
        lines.append("† measured while other runs shared the host (a packed campaign, "
                     "dltop run --pack): a throughput figure, not a clean single-run one.")
    if table.simulated_telemetry:
        lines.append("Device telemetry of this campaign came from SIMULATED GPUs "
                     "(--fake-gpus): not real hardware.")
    return "\n".join(lines) + "\n"


def _csv(table: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "framework", "batch", *table.columns])
    for r in table.rows:
        cells = [("" if c is None else repr(c.value) if c.value is not None
                  else LABELS.get(c.status, c.status)) for c in r.cells]
        w.writerow([r.model, r.framework, r.batch_size, *cells])
    return buf.getvalue()


def _json(table: Table) -> str:
    c = table.campaign
    rows: list[dict[str, Any]] = []
    for r in table.rows:
        cells = {col: (None if cell is None else {
            "value": cell.value, "status": cell.status, "label": cell.text(table.metric),
            "n_runs": cell.n_runs, "spread_s": cell.spread_s, "noisy": cell.noisy,
            "packed": cell.packed})
            for col, cell in zip(table.columns, r.cells, strict=True)}
        rows.append({"model": r.model, "framework": r.framework, "batch": r.batch_size,
                     "cells": cells})
    doc = {"campaign": {"id": c.id, "name": c.name, "status": c.status,
                        "created_at": c.created_at, "host": c.host},
           "metric": table.metric, "unit": _unit(table.metric),
           "simulated_telemetry": table.simulated_telemetry,
           "columns": list(table.columns), "rows": rows}
    return json.dumps(doc, indent=2) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "†": r"\textdagger{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def _latex(table: Table) -> str:
    c = table.campaign
    cols = "lll" + "r" * len(table.columns)
    head = ["Model", "Framework", "Batch", *table.columns]
    lines = [f"% dltop campaign {c.id} ({latex_escape(c.name)}): {_unit(table.metric)}",
             f"\\begin{{tabular}}{{{cols}}}", "\\toprule",
             " & ".join(latex_escape(h) for h in head) + " \\\\", "\\midrule"]
    lines += [" & ".join(latex_escape(t) for t in row) + " \\\\" for row in _texts(table)]
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"
