"""What Markdown and LaTeX show of a :class:`~dltop.results.table.Table`: one pass over
its cells that every results table goes through (pivot, summary, scaling, compare, check).

Four rules, none of which touches CSV or JSON (they keep full numbers, seconds, and
each cell's whole reason: they are read by programs):

- **Each n/a reason is stated once.** A cell ``n/a: window 0.031 s, readings not counted
  (set min_time_s)`` shows ``n/a`` with a footnote mark; the reason is listed once under
  the table, numbered in the order the cells first give it. Reasons that differ only in
  their numbers are one reason, its numbers given as the range the cells hold (``window
  0.024 to 0.67 s, readings not counted``): the H200 check's 14 window lengths are one
  footnote, not 14.
- **No column n/a in every row.** A flat table's value column whose every cell is
  ``n/a`` for one reason is left out and named once with its reason
  (:func:`without_unavailable`): a CPU host's power, GPU memory and MFU columns.
- **No setting the same in every row.** A key column holding a setting
  (:attr:`Column.setting`: ``precision``, ``system``) with one value in every row is
  a setting of the whole table: stated once in the caption (where its ``constant:``
  line does not already), never repeated per row; one absent (``-``) in every row is
  left out and named once.
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
from dataclasses import dataclass, replace

from dltop.results.table import Cell, Layout, Millis, Role, Table, ms_header, pick_columns

NA_PREFIX = "n/a: "
"""A cell that says why it has no number: ``n/a: <reason>``."""
_NUM = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_LEAD = re.compile(rf"{_NUM}(?: / {_NUM})*")
"""The numbers a cell's text starts with: its value, and a percentile cell's p90 and p99."""
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


def _token(token: str, scale: float) -> str:
    """One number of a cell as shown: unchanged when it has at most 4 significant
    digits, is under 1 000 and is not scaled (most cells: no float parsed)."""
    if scale == 1:
        body = token.lstrip("-")
        dot = body.find(".")
        whole = body if dot < 0 else body[:dot]
        if len(whole) <= 3 and "e" not in body \
                and len(body.replace(".", "").lstrip("0")) <= SIGNIFICANT:
            return token
    return number_text(float(token) * scale)


def _numbers(text: str, scale: float) -> str:
    """``text`` with its leading numbers (a value, or a percentile cell's p50 / p90 /
    p99) scaled and cut to 4 significant digits; the rest of the text as it was."""
    lead = _LEAD.match(text)
    if lead is None:
        return text
    numbers = lead.group(0)
    if " " not in numbers:  # one number: the usual cell
        shown_number = _token(numbers, scale)
        return text if shown_number is numbers else shown_number + text[lead.end():]
    return " / ".join(_token(t, scale) for t in numbers.split(" / ")) + text[lead.end():]


def without_unavailable(table: Table) -> Table:
    """The table without the value columns that are ``n/a`` for one reason in every row
    (power, J/sample, GPU memory, MFU on a CPU-only host), named once in a line before
    its caption; the table as it is when it has no such column or no row, and a pivot
    (its value columns are its data: an empty one says which device had nothing)."""
    if table.layout is not Layout.FLAT:
        return table
    dropped: dict[str, list[str]] = {}  # a reason → the headers of the columns it empties
    same: list[str] = []  # "precision fp32": a setting column with one value in every row
    absent: list[str] = []  # a setting no row has (check's system off a cluster)
    keep: list[int] = []
    for k, column in enumerate(table.columns):
        if column.setting and table.rows:
            texts = {c.text if (c := row.cells[k]) is not None else "" for row in table.rows}
            if len(texts) == 1:
                text = texts.pop()
                if text in ("", "-"):
                    absent.append(column.header)
                elif not _stated(table.caption, f"{column.header} {text}"):
                    same.append(f"{column.header} {text}")
                continue
        # an empty cell (a configuration without an ok run) says nothing either way
        cells = [c for row in table.rows if (c := row.cells[k]) is not None
                 and (c.value is not None or c.text)]
        reasons = {c.text[len(NA_PREFIX):] if c.value is None
                   and c.text.startswith(NA_PREFIX) else None for c in cells}
        if column.role is Role.VALUE and cells and len(reasons) == 1 \
                and (reason := reasons.pop()) is not None:
            # a latency is named as the table heads it ("TTFT p99 (ms)", never "... s")
            dropped.setdefault(reason, []).append(
                ms_header(column.header) if column.ms is Millis.ALWAYS else column.header)
        else:
            keep.append(k)
    if len(keep) == len(table.columns):
        return table
    notes = [f"the same in every row: {', '.join(same)}"] if same else []
    if absent:
        notes.append(f"not shown, none in any row: {', '.join(absent)} (CSV and JSON keep "
                     f"{'it' if len(absent) == 1 else 'them'})")
    if dropped:
        notes.append("not shown, n/a in every row: " + "; ".join(
            f"{', '.join(headers)} ({reason})" for reason, headers in dropped.items()) +
            " (--columns shows them, CSV and JSON keep them)")
    picked = pick_columns(table, [table.columns[k].key for k in keep])
    return replace(picked, caption=(*notes, *picked.caption))


def left_out_lines(table: Table, kept: Table) -> tuple[str, ...]:
    """The lines :func:`without_unavailable` put before ``table``'s caption in ``kept``,
    its result: what it left out or stated once (none where it changed nothing)."""
    return kept.caption[:len(kept.caption) - len(table.caption)]


def _stated(caption: Iterable[str], words: str) -> bool:
    """Whether a caption line lists ``words`` (``precision fp32``) as one of its items."""
    return any(re.search(rf"(?:^|: |, ){re.escape(words)}(?:,|$|\.)", line)
               for line in caption)


PERCENTILES = ("p90_s", "p99_s")
"""A latency cell's other numbers (its value is the p50), shown after it."""


def _cell_seconds(cell: Cell) -> Iterable[float]:
    for number in (cell.value, *(cell.detail.get(key) for key in PERCENTILES)):
        if isinstance(number, float | int) and math.isfinite(number):
            yield float(number)


def in_ms(table: Table, k: int) -> bool:
    """Whether column ``k`` is shown in milliseconds (:attr:`Column.ms`)."""
    rule = table.columns[k].ms
    if rule is None:
        return False
    if rule is Millis.ALWAYS:
        return True
    return all(s < 1 for row in table.rows if (c := row.cells[k]) is not None
               for s in _cell_seconds(c))


_SLOT = re.compile(r"\d+(?:\.\d+)?")
"""A number inside a reason: the part that may vary between cells of one reason."""


def _footnotes(reasons: dict[str, int]) -> tuple[dict[str, int], tuple[str, ...]]:
    """Marks for ``reasons`` (each cell's reason, in order of first use) merged by shape:
    reasons equal but for their numbers share one mark; its text gives each varying
    number as the range the reasons hold."""
    shapes: dict[str, list[str]] = {}
    for reason in reasons:
        shapes.setdefault(_SLOT.sub("#", reason), []).append(reason)
    mark_of: dict[str, int] = {}
    notes: list[str] = []
    for k, group in enumerate(shapes.values(), 1):
        for reason in group:
            mark_of[reason] = k
        notes.append(group[0] if len(group) == 1 else _ranged(group))
    return mark_of, tuple(notes)


def _ranged(group: list[str]) -> str:
    """One text for reasons of one shape: each number slot that varies as ``low to high``."""
    columns = list(zip(*(_SLOT.findall(r) for r in group), strict=True))
    parts = iter(columns)

    def slot(match: re.Match[str]) -> str:
        values = next(parts)
        if len(set(values)) == 1:
            return match.group()
        low, high = min(values, key=float), max(values, key=float)
        return f"{low} to {high}"

    return _SLOT.sub(slot, group[0])


def shown(table: Table) -> Shown:
    """The table's display: marks and footnotes, milliseconds, 4 significant digits."""
    ms = [in_ms(table, k) for k in range(len(table.columns))]
    # per column: None for a key column (its text as it is), else the numbers' scale
    scales = [None if c.role is Role.KEY else (1000.0 if m else 1.0)
              for c, m in zip(table.columns, ms, strict=True)]
    marks: dict[str, int] = {}
    rows: list[tuple[tuple[str, int], ...]] = []
    empty = ("", 0)
    for row in table.rows:  # 270 000 cells in a 10 000-row summary: one loop, no calls
        out: list[tuple[str, int]] = []
        for cell, scale in zip(row.cells, scales, strict=True):
            if cell is None:
                out.append(empty)
                continue
            text, value = cell.text, cell.value
            if scale is None:
                out.append((text, 0))
            elif value is None:
                if text.startswith(NA_PREFIX):
                    reason = text[len(NA_PREFIX):]
                    out.append(("n/a", marks.setdefault(reason, len(marks) + 1)))
                else:
                    out.append((text, 0))
            elif scale == 1 and isinstance(value, int):  # an exact count stays exact
                out.append((text, 0))
            else:
                out.append((_numbers(text, scale), 0))
        rows.append(tuple(out))
    if marks:  # merge reasons that differ only in their numbers, renumbering the cells
        mark_of, footnotes = _footnotes(marks)
        renumber = {k: mark_of[reason] for reason, k in marks.items()}
        rows = [tuple((text, renumber[k] if k else 0) for text, k in row) for row in rows]
    else:
        footnotes = ()
    title = table.title
    if table.layout is Layout.PIVOT and any(ms):
        title = title.replace("seconds per", "milliseconds per").replace(" in s ", " in ms ")
    return Shown(
        title=title,
        headers=tuple(ms_header(c.header) if m else c.header
                      for c, m in zip(table.columns, ms, strict=True)),
        latex_headers=tuple(ms_header(c.latex_header or c.header) if m
                            else c.latex_header or c.header
                            for c, m in zip(table.columns, ms, strict=True)),
        rows=tuple(rows), footnotes=footnotes)
