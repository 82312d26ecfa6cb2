"""``dltop runs``' table drawn without Rich is the table Rich draws, or left to Rich."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dltop.tui.boxtable import box_table

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def rich(headers: list[str], rows: list[list[str]], footer: str | None, *, width: int,
         terminal: bool) -> str:
    table = Table(*headers)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    out = io.StringIO()
    console = Console(width=width, file=out, force_terminal=terminal, color_system="standard")
    console.print(table)
    if footer:
        console.print(Text(footer), highlight=False)
    return out.getvalue()


TABLES = [
    (["run", "status", "note"], [], None),
    (["run", "status", "note"], [["1", "ok", ""], ["22", "crashed", "exit 1 [/__w/x]"]],
     "constant: lr 0.01"),
    (["a"], [["x" * 150]], None),
    (["model", "median s"], [["fcn-r", "0.01"], ["lstm", "-"]], "f" * 200),
]


@pytest.mark.parametrize(("headers", "rows", "footer"), TABLES)
@pytest.mark.parametrize("terminal", [False, True])
def test_drawn_as_rich_draws_it(headers: list[str], rows: list[list[str]],
                                footer: str | None, terminal: bool,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    ours = box_table(headers, rows, footer, width=200, terminal=terminal)
    theirs = rich(headers, rows, footer, width=200, terminal=terminal)
    assert ours is not None
    # On a terminal Rich sets bold per piece of a header cell; the text shown is the same.
    assert ANSI.sub("", ours) == ANSI.sub("", theirs)
    assert (ours != ANSI.sub("", ours)) == terminal


@pytest.mark.parametrize(("headers", "rows", "footer", "width"), [
    (["a", "b"], [["x" * 150, "y" * 60]], None, 200),   # wider than the console: wraps
    (["a"], [["x"]], "f" * 201, 200),                     # so does a long footer
    (["a"], [["日本"]], None, 200),                       # wide characters
    (["a"], [["two\nlines"]], None, 200),                 # a multi-line cell
    (["a"], [["x"]], None, 3),
])
def test_anything_else_is_left_to_rich(headers: list[str], rows: list[list[str]],
                                       footer: str | None, width: int) -> None:
    assert box_table(headers, rows, footer, width=width, terminal=False) is None
