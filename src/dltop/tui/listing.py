"""Plain listings for the command line (``dltop runs``), fitted to the terminal.

A listing has more columns than 80 terminal columns hold. Rather than truncate
every column (``fr…``, ``mo…``), whole columns are dropped, lowest priority
first, until the rest fit; the one *flexible* column (a run's cause or note)
gets the width that is left and only it is cut. On a terminal the table is drawn
in Rich's look (:mod:`dltop.tui.boxtable` draws it without loading Rich, for
start-up time); piped or redirected, it is plain text: aligned columns, no box
characters, no colour, and no width limit unless ``$COLUMNS`` sets one.

Part of the client layer beside the Textual viewer: the CLI hands it rows of
text and it owns the terminal formatting. Cells are ``Text``, never markup, so
a run's message such as ``[/__w/...]`` is printed as written, and their control
characters are escaped (:mod:`dltop.textsafe`): no ``ESC`` reaches the terminal.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from dltop.textsafe import one_line
from dltop.tui.boxtable import box_table

GAP = "  "
"""Between the columns of a plain (piped) listing."""
CONSTANT = "constant: "
"""How a footer states the settings every row shares (identity.Variation.caption's)."""
CUT = "..."
"""End of a flexible cell cut to its width (ASCII: the box table stays Rich-free)."""


@dataclass(frozen=True)
class ListColumn:
    """A listing column and how much it matters when space is short."""

    header: str
    priority: int = 1
    """1 is dropped last; a higher number is dropped sooner (ties: the rightmost first)."""
    flex: bool = False
    """Takes the width the kept columns leave (cut to it), at least ``min_width``."""
    min_width: int = 0
    setting: bool = False
    """A setting of each row (its campaign, framework, model...): where every row of
    several has one value it is stated once under the listing, not repeated per row."""


def _chrome(n: int, boxed: bool) -> int:
    """Characters a row spends outside its cells: borders and padding, or the gaps."""
    if n == 0:
        return 0
    return 3 * n + 1 if boxed else len(GAP) * (n - 1)


def fit(columns: Sequence[ListColumn], rows: Sequence[Sequence[str]], width: int | None,
        *, boxed: bool) -> tuple[list[int], dict[int, int]]:
    """The columns that fit ``width`` (indices, in order) and the flexible ones' widths.

    Args:
        columns: the listing's columns.
        rows: its cells (one line each).
        width: characters a line may take; ``None``: no limit (every column, uncut).
        boxed: drawn with Rich's borders (3 characters a column) or with gaps.
    """
    natural = [max([len(c.header), *(len(r[i]) for r in rows)])
               for i, c in enumerate(columns)]
    kept = list(range(len(columns)))
    if width is None:
        return kept, {}

    def need(i: int) -> int:
        c = columns[i]
        return min(natural[i], max(c.min_width, len(c.header))) if c.flex else natural[i]

    while kept and sum(map(need, kept)) + _chrome(len(kept), boxed) > width:
        # the lowest priority goes first; among equals the rightmost (kept order is left-right)
        drop = max(reversed(kept), key=lambda i: columns[i].priority)
        kept.remove(drop)
    room = width - _chrome(len(kept), boxed) - sum(
        natural[i] for i in kept if not columns[i].flex)
    flexible = [i for i in kept if columns[i].flex]
    widths = {}
    for i in flexible:  # one flexible column in practice; several share what is left
        share = max(need(i), room // len(flexible))
        widths[i] = min(natural[i], share)
    return kept, widths


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, ending with ``...`` where cut."""
    if len(text) <= width:
        return text
    return text[:max(0, width - len(CUT))] + CUT[:width]


def _width(terminal: bool) -> int | None:
    if terminal:
        return shutil.get_terminal_size().columns
    # piped: no limit (a file or a pipe keeps whole lines) unless the user sets one
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def layout(columns: Sequence[ListColumn], rows: Sequence[Sequence[str]], width: int | None,
           *, boxed: bool) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the columns that fit, flexible cells cut to their width."""
    headers = [one_line(c.header) for c in columns]
    cells = [[one_line(cell) for cell in row] for row in rows]
    kept, widths = fit(columns, cells, width, boxed=boxed)
    out_rows = [[cut(row[i], widths[i]) if i in widths else row[i] for i in kept]
                for row in cells]
    return [headers[i] for i in kept], out_rows


def plain(headers: Sequence[str], rows: Sequence[Sequence[str]],
          footer: str | None = None) -> str:
    """Aligned columns separated by two spaces: no borders, no colour."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = [GAP.join(f"{c:<{w}}" for c, w in zip(line, widths, strict=True)).rstrip()
             for line in (headers, *rows)]
    if footer:
        lines.append(footer)
    return "\n".join(lines) + "\n"


def settled(columns: Sequence[ListColumn], rows: Sequence[Sequence[str]],
            footer: str | None = None) -> tuple[list[ListColumn], list[list[str]], list[str]]:
    """The listing without what every row repeats, the exports' rule
    (:mod:`dltop.results.display`): a setting column with one value in every row of
    several, and a column empty or ``-`` in every row; with the footer's lines that say
    so (a ``constant:`` footer gains the settings)."""
    same: list[str] = []
    absent: list[str] = []
    kept: list[int] = []
    for i, c in enumerate(columns):
        values = {row[i] for row in rows}
        if rows and values <= {"", "-"}:
            if values == {"-"}:  # n/a in every row: named; an empty note says nothing
                absent.append(c.header)
        elif c.setting and len(rows) > 1 and len(values) == 1:
            same.append(f"{c.header} {values.pop()}")
        else:
            kept.append(i)
    lines = [footer] if footer else []
    if same and footer and footer.startswith(CONSTANT):
        lines = [f"{CONSTANT}{', '.join(same)}, {footer[len(CONSTANT):]}"]
    elif same:
        lines = [f"{CONSTANT}{', '.join(same)}", *lines]
    if absent:
        lines.append(f"not shown, none in any row: {', '.join(absent)}")
    return ([columns[i] for i in kept], [[row[i] for i in kept] for row in rows], lines)


def print_listing(columns: Sequence[ListColumn], rows: Sequence[Sequence[str]],
                  footer: str | None = None) -> None:
    """Print a listing to stdout: fitted and boxed on a terminal, plain text otherwise;
    what every row repeats is said once under it (:func:`settled`)."""
    columns, rows, lines = settled(columns, rows, footer)
    terminal = sys.stdout.isatty()
    width = _width(terminal)
    lines = [one_line(x) for x in lines]
    if width is not None:  # wrapped, not cut: it says what every run shares
        lines = [w for x in lines for w in textwrap.wrap(x, width, break_on_hyphens=False)]
    footer = "\n".join(lines) or None
    headers, cells = layout(columns, rows, width, boxed=terminal)
    if not terminal:
        sys.stdout.write(plain(headers, cells, footer))
        return
    assert width is not None
    fast = box_table(headers, cells, footer, width=width, terminal=True)
    if fast is not None:  # Rich's look without loading Rich (start-up time)
        sys.stdout.write(fast)
        return
    from rich.console import Console
    from rich.table import Column, Table
    from rich.text import Text

    # wide characters (or any non-ASCII text): Rich measures and cuts them
    table = Table(*(Column(Text(h), no_wrap=True, overflow="ellipsis") for h in headers))
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    console = Console(width=width)
    console.print(table)
    if footer:
        console.print(Text(footer), highlight=False)

