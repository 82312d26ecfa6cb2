"""Plain listings for the command line (``dltop runs``), drawn with Rich.

Part of the client layer beside the Textual viewer: the CLI hands it rows of
text and it owns the terminal formatting. Cells are ``Text``, never markup, so
a run's message such as ``[/__w/...]`` is printed as written, and their control
characters are escaped (:mod:`dltop.textsafe`): no ``ESC`` reaches the terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from dltop.textsafe import one_line


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[str]],
               footer: str | None = None) -> None:
    """Print a table of text cells to stdout, with an optional plain line under it."""
    table = Table(*(Column(Text(one_line(h))) for h in headers))
    for row in rows:
        table.add_row(*(Text(one_line(cell)) for cell in row))
    # Not a terminal: a wide virtual console, so piped output is never truncated.
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    if footer:
        console.print(Text(one_line(footer)), highlight=False)
