"""What the results screen shows, computed from the headless results tables.

The pivot of one metric (:func:`dltop.results.export.build_table`), the
scaling rows (:mod:`dltop.results.scaling`) and, for a serve campaign, the serving
answer (:func:`dltop.results.slo.slo_table`) are read in a worker thread
(:func:`compute`), each through the exports' rule
(:func:`dltop.results.display.without_unavailable`: a setting the same in every row
to the caption, a column n/a in every row left out and named); the rest is pure and
cheap, run on the event loop: each cell as styled text with its n and spread, the
best cell of each row, the order of the rows for a sort and the legend of the failures
shown (the scaling table's lines and the speedup bars: :mod:`dltop.tui.results_scaling`).
No widget here: :mod:`dltop.tui.results_screen` puts it on the screen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from dltop.catalog import JobStatus, RunStatus
from dltop.errors import UserError
from dltop.results.display import (
    NA_PREFIX,
    left_out_lines,
    superscript,
    without_unavailable,
)
from dltop.results.metricdefs import CONVERGENCE, METRICS
from dltop.results.metricdefs import metric as metric_spec
from dltop.results.table import Cell, Role, Row, Table, pick_columns
from dltop.telemetry.values import opt_float
from dltop.textsafe import one_line

if TYPE_CHECKING:  # the results' modules load in the worker that computes (compute)
    from dltop.results.aggregate import ConfigResult

METRIC_NAMES = (*(n for n in METRICS if n not in CONVERGENCE and n != "mean-time"),
                "mean-time", *CONVERGENCE)
"""The metric switch's order: ``dltop export --metric``'s choices, time then throughput
(``m`` toggled these two before it cycled), the mean time, then the metrics of
convergence and inference runs (accuracy, time-to-accuracy, epoch time, latency,
perplexity: ``n/a`` for runs without evaluations or timed forward passes)."""
SLO_TABLE = "slo"
"""The serving answer (``dltop export --table slo``), offered after the metrics where the
campaign has serve runs: chosen as a metric is, its table in the pivot's place."""
OVERHEAD_TABLE = "overhead"
"""The server's overhead (``dltop export --table overhead``), offered after ``slo`` where
a serve run says which of dltop's models it serves (``shape``)."""
TABLES = (SLO_TABLE, OVERHEAD_TABLE)
CHOICES = (*METRIC_NAMES, *TABLES)
"""Everything the metric switch may show, in its order."""
SLO_LATE = ("rates", "attainment", "note")
"""The slo table's columns of per-rate text (its JSON keys), last on the screen: the
capacity and its figures are read without scrolling at 80 columns."""
BEST_STYLE = "bold black on green"
_FAILURES: dict[str, tuple[str, str]] = {
    RunStatus.CRASHED: ("bold red", "the runner crashed"),
    RunStatus.OOM: ("bold magenta", "out of memory"),
    RunStatus.TIMEOUT: ("bold yellow", "ran past its time limit"),
    RunStatus.DIVERGED: ("red", "loss not finite"),
    RunStatus.SHORT: ("yellow", "fewer iterations than asked"),
    RunStatus.CANCELLED: ("italic bright_black", "cancelled"),
    RunStatus.SETUP_FAILED: ("bold red", "a Slurm setup line failed"),
    RunStatus.UNSUPPORTED: ("bright_black", "not supported"),
    RunStatus.UNSATISFIABLE: ("bright_black", "devices not on host"),
    RunStatus.RUNNING: ("cyan", "running"), JobStatus.QUEUED: ("bright_black", "queued"),
    JobStatus.REMOVED: ("strike bright_black", "removed"),
    # the slo table's capacity: no rate passes, or every rate tried does (not failures)
    "none": ("bright_black", "no capacity"), "at least": ("", "every rate tried passes")}
"""A cell without a number: its style and what it means, by its configuration's status."""
FAILURE_STYLE = {status: style for status, (style, _) in _FAILURES.items()}
MEANING = {status: meaning for status, (_, meaning) in _FAILURES.items()}
REASON_STYLE = {"simulated": "italic blue"}
"""A configuration that ran ok but has no number for this metric (``n/a: no GPU``...)."""
NA_STYLE = "bright_black"
LEGEND_REASONS = 3
"""n/a reasons the legend line spells out; more are listed under the tables."""
BAR_MAX = 60
"""Widest bar of the speedup chart: the top speedup (or the most devices) fills it."""
MARKS = {"*": "noisy (a run's CV > 0.10)", "†": "packed (--pack) or shared (another engine)",
         "§": "contaminated (a foreign process)",
         "!": "oversubscribed (cpu:N on a host of fewer CPUs)"}


@dataclass(frozen=True)
class ResultsData:
    """One campaign's results for one metric, as the screen shows them."""

    metric: str
    pivot: Table
    scaling: Table | None
    """The scaling table, when some configuration has more than one device."""
    results: Sequence[ConfigResult] = ()
    """The configurations both tables were made of (metric-free: the next metric's
    table is made of them too, with no database read)."""
    metrics: tuple[str, ...] = METRIC_NAMES
    """The metrics the switch offers for this campaign (:func:`offered_metrics`)."""
    refused: str = ""
    """Why the table of :data:`TABLES` asked cannot be made of this campaign: the one line
    ``dltop export --table slo`` (or ``overhead``) says (``pivot`` is empty then)."""


def offered_metrics(results: Sequence[ConfigResult]) -> tuple[str, ...]:
    """The metrics worth a switch for these configurations, in :data:`METRIC_NAMES`
    order: every timed and telemetry one (their n/a says why: no GPU, no FLOPs count),
    and those of convergence and inference runs only where some configuration has a
    value (no accuracy for a campaign that never evaluated, no TTFT without generate
    runs), as the summary's columns (:func:`dltop.results.summary.shown_extras`)."""
    from dltop.results.summary import of_other_modes, shown_extras

    extras, other = set(shown_extras(results)), of_other_modes(results)  # serve: no MFU
    served = [r for r in results if r.identity.get("mode") == "serve"]
    return tuple(name for name in METRIC_NAMES
                 if (name not in CONVERGENCE or name in extras) and name not in other
                 ) + ((SLO_TABLE,) if served else ()) + (
                     (OVERHEAD_TABLE,) if any(r.identity.get("shape") for r in served) else ())


def compute(db_path: Path, campaign_id: int, metric: str,
            scaling: Table | bool | None = True,
            results: Sequence[ConfigResult] | None = None) -> ResultsData:
    """Read the pivot of ``metric`` (or the slo table, :data:`SLO_TABLE`) and the
    scaling table (blocking: a worker thread). A campaign the slo table cannot answer
    gives its reason in :attr:`ResultsData.refused`, not an exception.

    Args:
        scaling: ``True`` reads the scaling table; a table (or ``None``) computed
            before is kept, since a metric switch does not change it.
        results: the campaign's configurations read before (for this state of it);
            None reads them, once for both tables (2 s at 100 000 jobs).
    """
    from dltop.results.aggregate import config_results
    from dltop.results.export import build_table, campaigns_of
    from dltop.results.overhead import overhead_table
    from dltop.results.scaling import scaling_rows, scaling_table
    from dltop.results.slo import slo_table
    from dltop.store import connect

    db = connect(db_path, create=False)
    refused = ""
    try:
        if results is None:
            results = config_results(db, [campaign_id])
        if metric in TABLES:
            try:
                camps = campaigns_of(db, campaign_id)
                answer = (slo_table if metric == SLO_TABLE else overhead_table)(
                    db, camps, results=results)
                keys = [c.key for c in answer.columns]
                pivot = pick_columns(answer, [k for k in keys if k not in SLO_LATE] +
                                     [k for k in SLO_LATE if k in keys])
            except UserError as exc:
                refused = one_line(str(exc))
                pivot = Table(title=refused, columns=(), rows=())
        else:
            pivot = build_table(db, campaign_id, metric, results=results)
        if scaling is True:
            rows = scaling_rows(db, campaign_id, results=results)
            scaling = (settled(scaling_table(rows, "Scaling (speedup vs 1 device)"))
                       if any(r.n_devices > 1 for r in rows) else None)
    finally:
        db.close()
    return ResultsData(metric, without_unavailable(pivot),
                       scaling if isinstance(scaling, Table) else None,
                       results, offered_metrics(results), refused)


def settled(table: Table) -> Table:
    """The scaling table by the exports' rule (:func:`without_unavailable`), its caption
    only the lines that rule adds: the constant settings are the pivot's, said once."""
    kept = without_unavailable(table)
    return replace(kept, caption=left_out_lines(table, kept))


def best_columns(row: Row, table: Table, metric: str) -> set[int]:
    """Indices of the row's best value cells (ties all), where it has two or more numbers."""
    numbers = {i: v for i, (col, cell) in enumerate(zip(table.columns, row.cells, strict=True))
               if col.role is Role.VALUE and cell is not None
               and (v := opt_float(cell.value)) is not None}
    if len(numbers) < 2 or metric in TABLES:  # their columns are different measures
        return set()
    # the metric's declared direction: the largest rate, the smallest time
    top = max(numbers.values()) if metric_spec(metric).higher else min(numbers.values())
    return {i for i, v in numbers.items() if v == top}


def spread_text(cell: Cell, metric: str) -> str:
    """`` n3 ±1.2%``: the runs behind a number and, for the median time, the spread of
    their medians (max - min) in % of it. Empty for a cell without a number."""
    if cell.value is None or "n_runs" not in cell.detail:  # slo: a column says the runs
        return ""
    out = f" n{cell.detail.get('n_runs', '?')}"
    spread = cell.detail.get("spread_s")
    if metric == "time" and spread is not None and cell.value and int(cell.detail.get(
            "n_runs", 0)) > 1:
        out += f" ±{100.0 * float(spread) / float(cell.value):.1f}%"
    return out


def reason_marks(table: Table) -> dict[str, int]:
    """Each ``n/a: reason`` of the table's value cells numbered once, in the order the
    cells first give it: the cells show ``n/a¹``, the legend the reason (as the
    exports' footnotes, :mod:`dltop.results.display`)."""
    marks: dict[str, int] = {}
    values = [k for k, col in enumerate(table.columns) if col.role is Role.VALUE]
    for row in table.rows:
        for k in values:
            cell = row.cells[k]
            if cell is not None and cell.value is None and cell.text.startswith(NA_PREFIX):
                marks.setdefault(cell.text, len(marks) + 1)
    return marks


def cell_text(cell: Cell | None, role: Role, metric: str, best: bool,
              marks: Mapping[str, int] | None = None, shown_text: str | None = None,
              ) -> Text:
    """A cell as the table shows it: keys plain; numbers with their n and spread (the
    row's best highlighted), as ``shown_text`` says when given (the exports' display:
    ms, 4 significant digits); a missing number coloured by its reason, an ``n/a:
    reason`` as ``n/a`` and its mark in ``marks`` (:func:`reason_marks`)."""
    if cell is None:
        return Text("")
    text = one_line(cell.text)
    if role is Role.KEY:
        return Text(text)
    if cell.value is not None:
        out = Text(one_line(shown_text) if shown_text is not None else text,
                   BEST_STYLE if best else "")
        out.append(spread_text(cell, metric), "dim")
        return out
    if marks and (mark := marks.get(cell.text)) is not None:
        return Text("n/a" + superscript(mark), failure_style(cell))
    return Text(text, failure_style(cell))


def failure_style(cell: Cell) -> str:
    """The colour of a cell without a number: its status's, else its reason's."""
    if cell.status and cell.status != RunStatus.OK:
        return FAILURE_STYLE.get(cell.status, "bold red")
    return REASON_STYLE.get(cell.text, NA_STYLE)


def sort_rows(table: Table, column: int | None, descending: bool) -> list[Row]:
    """The rows ordered by a column (numbers by value, text by text); cells without a
    number last whichever the direction. ``None``: the table's own order."""
    rows = list(table.rows)
    if column is None:
        return rows

    def key(row: Row) -> Any:
        cell = row.cells[column]
        if cell is None:
            return None
        if cell.value is not None and not isinstance(cell.value, bool):
            return (0, float(cell.value), "")
        return None if table.columns[column].role is Role.VALUE else (1, 0.0, cell.text)

    present = [r for r in rows if key(r) is not None]
    missing = [r for r in rows if key(r) is None]
    present.sort(key=key, reverse=descending)
    return present + missing


def legend(table: Table) -> Text:
    """What the coloured cells and the marks shown mean, only those in the table."""
    statuses: dict[str, str] = {}
    reasons: set[str] = set()
    marks: set[str] = set()
    for row in table.rows:
        for col, cell in zip(table.columns, row.cells, strict=True):
            if col.role is not Role.VALUE or cell is None:
                continue
            if cell.value is None:
                if cell.status and cell.status != RunStatus.OK:
                    statuses.setdefault(cell.status, cell.text)
                elif not cell.text.startswith(NA_PREFIX):  # those: by mark, below
                    reasons.add(cell.text)
            marks.update(m for m in MARKS if m in cell.text)
    out = Text(no_wrap=False)
    out.append(" best ", BEST_STYLE)
    out.append(" per row   nN: N runs  ±: spread of their medians   ", "dim")
    for status, label in statuses.items():
        out.append(one_line(label), FAILURE_STYLE.get(status, "bold red"))
        meaning = MEANING.get(status, status)
        out.append(f" {meaning}   " if meaning != one_line(label) else "   ", "dim")
    for reason in sorted(reasons):
        out.append(one_line(reason), REASON_STYLE.get(reason, NA_STYLE))
        out.append("   ")
    footnotes = reason_marks(table)  # each n/a reason once
    if len(footnotes) > LEGEND_REASONS:  # a line each, under the tables (notes_text)
        out.append(f"n/a{superscript(1)}-{superscript(len(footnotes))}", NA_STYLE)
        out.append(f" {len(footnotes)} reasons, listed below   ", "dim")
    else:
        for reason, k in footnotes.items():
            out.append("n/a" + superscript(k), NA_STYLE)
            out.append(f" {one_line(reason.removeprefix(NA_PREFIX))}   ", "dim")
    for mark in sorted(marks):
        out.append(f"{mark} {MARKS[mark]}   ", "dim")
    out.rstrip()
    return out


def _order_note(table: Table) -> str | None:
    """The note that states the order of the slo table's rows (its legend line)."""
    return next((note for note in table.notes if note.startswith("Sorted by")), None)


def slo_legend(table: Table) -> Text:
    """The slo table's line under it: the order its rows are in (its note that says so)
    and each n/a reason by mark, as :func:`legend` gives them."""
    out = Text(no_wrap=False)
    order = _order_note(table)
    out.append(one_line(order) if order else "rows in the table's order", "dim")
    out.append("   s: by a column   ", "dim")
    for reason, k in reason_marks(table).items():
        out.append("n/a" + superscript(k), NA_STYLE)
        out.append(f" {one_line(reason.removeprefix(NA_PREFIX))}   ", "dim")
    out.rstrip()
    return out


def notes_text(data: ResultsData) -> Sequence[str]:
    """The n/a reasons by mark (:func:`reason_marks`), the pivot's footnotes and
    caption, one line each."""
    reasons = [f"n/a{superscript(k)} {reason.removeprefix(NA_PREFIX)}"
               for reason, k in reason_marks(data.pivot).items()]
    # the slo table's order is its legend line already
    said = _order_note(data.pivot) if data.metric == SLO_TABLE else None
    notes = [note for note in data.pivot.notes if note != said]
    return [one_line(line) for line in (*reasons, *notes, *data.pivot.caption)]
