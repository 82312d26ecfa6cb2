"""Rich's table look (``box.HEAVY_HEAD``) drawn without Rich, for the common case.

``dltop runs`` must start in 0.15 s (benchmarks/startup.py); importing Rich and
laying out a 30-row table with it take 60-80 ms of that. A table of printable ASCII
cells that fits the width needs no wrapping, and is drawn here exactly as Rich draws
it (tests/results/test_runs_listing.py compares the two); anything else (wide or
non-ASCII text, a table wider than the terminal) is left to Rich.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

BOLD, RESET = "\x1b[1m", "\x1b[0m"


def _plain(text: str) -> bool:
    return text.isascii() and text.isprintable()


def box_table(headers: Sequence[str], rows: Sequence[Sequence[str]], footer: str | None,
              *, width: int, terminal: bool) -> str | None:
    """The table as Rich prints it at ``width`` columns, or None where Rich is needed.

    Args:
        headers: column names.
        rows: cells, as many per row as headers.
        footer: lines printed under the table, if any.
        width: the console's width; a table or footer wider than this is Rich's (it wraps).
        terminal: a terminal: headers bold (unless ``$NO_COLOR`` or ``TERM=dumb``).
    """
    notes = (footer or "").split("\n")  # its lines, each fitted by the caller
    if not all(_plain(c) for c in (*headers, *(c for r in rows for c in r), *notes)):
        return None
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    if sum(widths) + 3 * len(widths) + 1 > width or max(map(len, notes)) > width:
        return None
    bold = terminal and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def head(h: str, w: int) -> str:
        cell = f" {h:<{w}} "
        return f"{BOLD}{cell}{RESET}" if bold else cell

    lines = [rule("┏", "┳", "┓", "━"),
             "┃" + "┃".join(head(h, w) for h, w in zip(headers, widths, strict=True)) + "┃",
             rule("┡", "╇", "┩", "━")]
    lines += ["│" + "│".join(f" {c:<{w}} " for c, w in zip(r, widths, strict=True)) + "│"
              for r in rows]
    lines.append(rule("└", "┴", "┘", "─"))
    if footer:
        lines.append(footer)
    return "\n".join(lines) + "\n"
