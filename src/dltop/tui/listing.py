"""Plain listings for the command line (``dltop runs``), in Rich's table look.

A table of plain ASCII cells that fits is drawn by :mod:`dltop.tui.boxtable`
exactly as Rich draws it, without loading Rich (start-up time); anything else by Rich.

Part of the client layer beside the Textual viewer: the CLI hands it rows of
text and it owns the terminal formatting. Cells are ``Text``, never markup, so
a run's message such as ``[/__w/...]`` is printed as written, and their control
characters are escaped (:mod:`dltop.textsafe`): no ``ESC`` reaches the terminal.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

from dltop.textsafe import one_line
from dltop.tui.boxtable import box_table

PIPE_WIDTH = 200
"""Columns of the table when stdout is not a terminal."""


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[str]],
               footer: str | None = None) -> None:
    """Print a table of text cells to stdout, with an optional plain line under it."""
    headers = [one_line(h) for h in headers]
    rows = [[one_line(cell) for cell in row] for row in rows]
    footer = one_line(footer) if footer else footer
    terminal = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if terminal else PIPE_WIDTH
    fast = box_table(headers, rows, footer, width=width, terminal=terminal)
    if fast is not None:  # Rich's look without loading Rich (start-up time)
        sys.stdout.write(fast)
        return
    from rich.console import Console
    from rich.table import Column, Table
    from rich.text import Text

    table = Table(*(Column(Text(h)) for h in headers))  # a str header would be markup
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    # Not a terminal: a wide virtual console, so piped output is never truncated.
    console = Console(width=None if terminal else PIPE_WIDTH)
    console.print(table)
    if footer:
        console.print(Text(footer), highlight=False)
