"""What Markdown and LaTeX show of a :class:`~dltop.results.table.Table`: one pass over
its cells that every results table goes through (pivot, summary, scaling, compare, check).

Three rules, none of which touches CSV or JSON (they keep full numbers, seconds, and
each cell's whole reason: they are read by programs):

- **Each n/a reason is stated once.** A cell ``n/a: window 0.031 s, readings not counted
  (set min_time_s)`` shows ``n/a`` with a footnote mark; the reason is listed once under
  the table, numbered in the order the cells first give it.
- **Latencies in ms.** A seconds column marked :attr:`Column.ms` is shown in
  milliseconds, its header saying so (``TTFT p50/p90/p99 (ms)``): TTFT, TPOT and ITL
  always, end-to-end latency (p50/p90/p99) when every number of the column is under
  1 s. Seconds per training mini-batch stay seconds (the paper's table).
- **3-4 significant digits.** A number printed with more (``392155.2`` samples/s,
  ``18018`` MiB) is rounded to 4 significant digits; from 1 000 on it is written in
  full, digits grouped by threes with a space (``392 200``, ``1 368``), never in
  scientific notation. Exact counts (integers: runs, requests, calls) are left as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dltop.results.table import Cell, Column, Layout, Millis, Role, Table, ms_header

NA_PREFIX = "n/a: "
"""A cell that says why it has no number: ``n/a: <reason>``."""
_NUM = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_LEAD = re.compile(rf"{_NUM}(?: / {_NUM})*")
"""The numbers a cell's text starts with: its value, and a percentile cell's p90 and p99."""
_ONE = re.compile(_NUM)
SIGNIFICANT = 4
"""Significant digits Markdown and LaTeX show (CSV and JSON: all of them)."""
_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def superscript(n: int) -> str:
    """``12`` as ``¹²``: Markdown's footnote mark."""
    return str(n).translate(_SUPERSCRIPTS)


@dataclass(frozen=True)
class Shown:
    """A table as Markdown and LaTeX show it."""

    title: str
    headers: tuple[str, ...]
    latex_headers: tuple[str, ...]
    rows: tuple[tuple[tuple[str, int], ...], ...]
    """Per row, per column: the text and its footnote mark (0: none)."""
    footnotes: tuple[str, ...]
    """The reasons, footnote ``k`` at index ``k - 1``."""


def number_text(value: float) -> str:
    """``value`` with :data:`SIGNIFICANT` significant digits, grouped from 1 000 on:
    ``0.6177``, ``12.35``, ``1 368``, ``392 200``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 1000:
        digits = math.floor(math.log10(abs(value))) + 1
        rounded = int(round(value, SIGNIFICANT - digits))
        return f"{rounded:,}".replace(",", " ")
    body = f"{value:#.{SIGNIFICANT}g}"
    if "e" in body:  # under 0.001: as many decimals as 4 significant digits take
        decimals = SIGNIFICANT - 1 - math.floor(math.log10(abs(value)))
        body = f"{value:.{decimals}f}"
    return body.rstrip(".")


def _significant(token: str) -> int:
    mantissa = token.lstrip("-").split("e")[0].replace(".", "")
    return len(mantissa.lstrip("0")) or 1


def _numbers(text: str, scale: float) -> str:
    """``text`` with its leading numbers scaled and cut to 4 significant digits (only
    those printed with more, or scaled, or from 1 000 on)."""
    lead = _LEAD.match(text)
    if lead is None:
        return text

    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        value = float(token)
        if scale == 1 and abs(value) < 1000 and _significant(token) <= SIGNIFICANT:
            return token
        return number_text(value * scale)

    return _ONE.sub(one, lead.group(0)) + text[lead.end():]


def _cell_seconds(cell: Cell) -> Iterable[float]:
    if isinstance(cell.value, float | int) and math.isfinite(cell.value):
        yield float(cell.value)
    for key, extra in cell.detail.items():
        if key.endswith("_s") and isinstance(extra, float | int) and math.isfinite(extra):
            yield float(extra)


def in_ms(table: Table, k: int) -> bool:
    """Whether column ``k`` is shown in milliseconds (:attr:`Column.ms`)."""
    rule = table.columns[k].ms
    if rule is None:
        return False
    if rule is Millis.ALWAYS:
        return True
    return all(s < 1 for row in table.rows if (c := row.cells[k]) is not None
               for s in _cell_seconds(c))


def _ms_title(title: str) -> str:
    return title.replace("seconds per", "milliseconds per").replace(" in s ", " in ms ")


def shown(table: Table) -> Shown:
    """The table's display: marks and footnotes, milliseconds, 4 significant digits."""
    ms = [in_ms(table, k) for k in range(len(table.columns))]
    marks: dict[str, int] = {}
    rows: list[tuple[tuple[str, int], ...]] = []
    for row in table.rows:
        out: list[tuple[str, int]] = []
        for col, cell, milli in zip(table.columns, row.cells, ms, strict=True):
            out.append(_shown_cell(col, cell, milli, marks))
        rows.append(tuple(out))
    title = table.title
    if table.layout is Layout.PIVOT and any(ms):
        title = _ms_title(title)

    def head(col: Column, text: str, milli: bool) -> str:
        return ms_header(text) if milli else text

    return Shown(
        title=title,
        headers=tuple(head(c, c.header, m) for c, m in zip(table.columns, ms, strict=True)),
        latex_headers=tuple(head(c, c.latex_header or c.header, m)
                            for c, m in zip(table.columns, ms, strict=True)),
        rows=tuple(rows), footnotes=tuple(marks))


def _shown_cell(col: Column, cell: Cell | None, milli: bool,
                marks: dict[str, int]) -> tuple[str, int]:
    if cell is None:
        return ("", 0)
    if col.role is Role.KEY:
        return (cell.text, 0)
    if cell.value is None:
        if cell.text.startswith(NA_PREFIX):
            reason = cell.text[len(NA_PREFIX):]
            return ("n/a", marks.setdefault(reason, len(marks) + 1))
        return (cell.text, 0)
    if isinstance(cell.value, int) and not milli:  # an exact count stays exact
        return (cell.text, 0)
    return (_numbers(cell.text, 1000.0 if milli else 1.0), 0)
