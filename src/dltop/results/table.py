"""One table model for every results table; :mod:`dltop.results.render` draws it.

A results table is computed once as a :class:`Table`: columns that say what
they hold, rows of :class:`Cell` s that carry both their display text and their
number. Markdown, CSV, JSON and LaTeX are renderers of that object, so a new
row-key column or metric column is one more :class:`Column` and one more cell
per row, never new renderer code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from dltop.catalog import JobStatus, RunStatus

LABELS: Mapping[str, str] = {
    RunStatus.OOM: "OOM", RunStatus.UNSUPPORTED: "n/a", RunStatus.UNSATISFIABLE: "n/a",
    RunStatus.TIMEOUT: "timeout", RunStatus.CRASHED: "failed", RunStatus.DIVERGED: "diverged",
    RunStatus.CANCELLED: "cancelled", RunStatus.SHORT: "short", RunStatus.RUNNING: "-",
    RunStatus.SETUP_FAILED: "setup failed",
    JobStatus.QUEUED: "-"}
"""How a cell without a number names its status: every job status but ``ok`` (a cell of
only removed jobs says ``removed``, the status itself, as any unknown status would)."""


NOTE_INCOMPLETE = ("(n/m): only n of the m repeats planned gave a result (incomplete: "
                   "the others failed, were cancelled or have not run).")
"""The note under a table with a ``(n/m)`` cell (the time, metric and scaling tables')."""


def status_label(status: str) -> str:
    """``OOM``, ``n/a``, ``failed``, ... for a status; unknown statuses as they are."""
    return LABELS.get(status, status)


def fmt_seconds(value: float) -> str:
    """Seconds with 4 significant digits kept visible: 0.2520, 1.000, 12.35."""
    body = f"{value:#.4g}"
    return body.rstrip(".") if "e" not in body else body


def ms_header(header: str) -> str:
    """``median s`` as ``median (ms)``; a header without its unit gets ``(ms)`` added."""
    return (header[:-2] if header.endswith(" s") else header) + " (ms)"


class Role(StrEnum):
    """What a column is to its row."""

    KEY = "key"
    """Identifies the row (model, framework, batch, device...); left-aligned."""
    VALUE = "value"
    """A measurement; right-aligned."""


class Millis(StrEnum):
    """When a seconds column is shown in ms by Markdown and LaTeX."""

    ALWAYS = "always"
    """Latencies of a token or a request's first token (TTFT, TPOT, ITL)."""
    SUB_SECOND = "sub-second"
    """End-to-end seconds per inference batch or request: in ms when every number of the
    column is under 1 s (0.0006177 s reads 0.6177 ms; a 2.5 s request stays 2.500 s)."""


class Layout(StrEnum):
    """How the value columns relate, which only the JSON shape needs to know."""

    FLAT = "flat"
    """Each value column is its own measure: a row is ``{column key: value}``."""
    PIVOT = "pivot"
    """The value columns are one measure across a dimension (device configurations):
    a row nests them as ``"cells": {column key: {value, status, label, ...}}``."""


@dataclass(frozen=True)
class Column:
    """One column: its machine key, its headers and its unit."""

    key: str
    """Stable machine name: the JSON key."""
    header: str
    """Header in Markdown and CSV."""
    role: Role = Role.VALUE
    unit: str = ""
    """Unit of the column's numbers (``s``, ``samples/s``, ``1``); empty for keys."""
    latex_header: str = ""
    """Header in LaTeX; empty means ``header``."""
    detail: tuple[str, ...] = ()
    """Keys of its cells' :attr:`Cell.detail` that CSV gives columns of their own after
    the status (``<header> p90_s``...): a percentile cell's p90, p99 and n."""
    ms: Millis | None = None
    """Seconds that Markdown and LaTeX show in milliseconds (:mod:`dltop.results.display`);
    ``None``: shown as they are. CSV and JSON keep seconds whatever this says."""
    setting: bool = False
    """A key column holding a setting of the configuration (``precision``, ``system``):
    Markdown and LaTeX state it in the caption where every row has one value, and leave
    it out where none has one (:func:`dltop.results.display.without_unavailable`)."""

    @property
    def align(self) -> str:
        """``l`` or ``r``: keys left, numbers right."""
        return "l" if self.role is Role.KEY else "r"


_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})
"""The detail of every cell without one: shared, read-only (a table of 10 000
configurations has some 350 000 cells; an empty dict each was 22 MB)."""


# slots: no per-instance dict (the cells of a 10 000-configuration report were 100 MB)
@dataclass(frozen=True, slots=True)
class Cell:
    """A display text with the number behind it, or the status that explains its absence."""

    text: str
    """What Markdown and LaTeX show (rounded, marked, or a status label)."""
    value: float | int | None = None
    """The exact number (CSV and JSON keep it); ``None`` for text keys and missing results."""
    status: str = ""
    """The configuration's status (``ok``, ``oom``, ...); empty for key cells."""
    detail: Mapping[str, Any] = field(default_factory=lambda: _NO_DETAIL)
    """Further fields of the cell that JSON carries (runs, spread, flags)."""
    note: str = ""
    """Beside a number, why a detail number is missing (``p99 n/a: n=20``): CSV's status
    column and JSON's ``note`` say it, where the detail cell is empty or null."""

    @property
    def data(self) -> float | int | str | None:
        """The cell as data: its number if it has one, else its text (CSV, JSON keys)."""
        return self.value if self.value is not None else self.text


def key_cell(value: str | int) -> Cell:
    """A row-key cell: text keys keep ``value=None``, integer keys keep their number."""
    return Cell(str(value), value if isinstance(value, int) else None)


@dataclass(frozen=True, slots=True)
class Row:
    """One cell per column (``None``: no such configuration) and row-level JSON fields."""

    cells: tuple[Cell | None, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields JSON adds to the row after its columns (not displayed)."""


@dataclass(frozen=True)
class Table:
    """A results table, computed once, rendered by any format."""

    title: str
    """First line of the Markdown output."""
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()
    """Footnotes under the Markdown table."""
    caption: tuple[str, ...] = ()
    """What makes the table citable: the constant settings, the environment
    (:mod:`dltop.results.caption`). Markdown prints it under the notes, LaTeX and CSV
    as comment lines (``%``, ``#``) before the table."""
    comment: str = ""
    """The LaTeX ``%`` comment line; empty means ``title``."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Top-level JSON fields before ``columns``/``rows``: ``campaigns`` and
    ``environment`` first, then the table's own (metric, unit, identity...)."""
    layout: Layout = Layout.FLAT

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row.cells) != len(self.columns):
                raise ValueError(f"row has {len(row.cells)} cells for {len(self.columns)} "
                                 "columns")


def pick_columns(table: Table, names: Sequence[str]) -> Table:
    """The table with only the columns ``names`` (headers or keys, any case), in that
    order; each row's JSON ``reasons`` and ``detail`` keep only theirs.

    Raises:
        ValueError: a name that is no column's, naming those there are.
    """
    wanted: list[int] = []
    unknown: list[str] = []
    for name in names:
        folded = name.strip().casefold()
        found = next((k for k, c in enumerate(table.columns)
                      if folded in (c.header.casefold(), c.key.casefold(),
                                    ms_header(c.header).casefold() if c.ms else "")), None)
        if found is None:
            unknown.append(name)
        elif found not in wanted:
            wanted.append(found)
    if unknown:
        raise ValueError(f"unknown column {', '.join(map(repr, unknown))}: this table has "
                         + ", ".join(c.header for c in table.columns))
    keys = {table.columns[k].key for k in wanted}

    def extra(row: Row) -> Mapping[str, Any]:
        out = dict(row.extra)
        for field_name in ("reasons", "detail"):
            if isinstance(out.get(field_name), Mapping):
                out[field_name] = {k: v for k, v in out[field_name].items() if k in keys}
        return out

    alike = _hidden_differences(table, wanted)
    return replace(table, columns=tuple(table.columns[k] for k in wanted),
                   rows=tuple(Row(tuple(row.cells[k] for k in wanted), extra(row))
                              for row in table.rows),
                   caption=((f"rows that look alike differ in {', '.join(alike)} (not among "
                             "the columns shown)",) if alike else ()) + table.caption)


def _hidden_differences(table: Table, wanted: Sequence[int]) -> list[str]:
    """The headers of the key columns left out that tell apart rows whose shown keys are
    equal: without them, two rows of a study read as one configuration twice."""
    shown = [k for k in wanted if table.columns[k].role is Role.KEY]
    hidden = [k for k, c in enumerate(table.columns) if c.role is Role.KEY
              and k not in wanted]
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in table.rows:
        groups.setdefault(tuple(_text(row.cells[k]) for k in shown), []).append(row)
    alike = [rows for rows in groups.values() if len(rows) > 1]
    return [table.columns[k].header for k in hidden
            if any(len({_text(r.cells[k]) for r in rows}) > 1 for rows in alike)]


def _text(cell: Cell | None) -> str:
    return "" if cell is None else cell.text


def pick_rows(table: Table, where: Sequence[str]) -> Table:
    """The table with only the rows whose key columns hold what ``where`` asks:
    ``COLUMN=VALUE[,VALUE...]`` each (a header or key, any case; values as the column
    shows them, any case); every condition must hold.

    Raises:
        ValueError: a condition without ``=``, naming no key column (naming those
            there are), or none of whose values a row shows (naming those there are).
    """
    keys = [k for k, c in enumerate(table.columns) if c.role is Role.KEY]
    wanted: list[tuple[int, set[str]]] = []
    for cond in where:
        name, eq, values = cond.partition("=")
        folded = name.strip().casefold()
        found = next((k for k in keys if folded in (table.columns[k].header.casefold(),
                                                     table.columns[k].key.casefold())), None)
        if not eq or found is None:
            raise ValueError(f"{cond!r}: give COLUMN=VALUE[,VALUE], COLUMN one of this "
                             "table's key columns: "
                             + ", ".join(table.columns[k].header for k in keys))
        asked = {v.strip().casefold() for v in values.split(",")}
        shown = sorted({_text(r.cells[found]) for r in table.rows} - {""})
        if table.rows and not asked & {v.casefold() for v in shown}:
            # a typo (resnet50 for resnet-50) printed an empty table, exit 0
            raise ValueError(f"{cond!r}: no row's {table.columns[found].header} is "
                             f"{' or '.join(repr(v.strip()) for v in values.split(','))}; "
                             f"this table's: {', '.join(shown[:20])}"
                             + (f" and {len(shown) - 20} more" if len(shown) > 20 else ""))
        wanted.append((found, asked))

    def keep(row: Row) -> bool:
        return all((cell := row.cells[k]) is not None and cell.text.casefold() in values
                   for k, values in wanted)

    return replace(table, rows=tuple(r for r in table.rows if keep(r)))
