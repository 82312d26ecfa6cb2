"""The scaling view of the results screen as text: the scaling table's aligned lines
and the speedup bars (:mod:`dltop.results.scaling`'s rows, computed in
:func:`dltop.tui.results_view.compute`). Pure and cheap: run on the event loop."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from dltop.catalog import RunStatus
from dltop.results.display import shown, superscript
from dltop.results.table import Role, Row, Table, status_label
from dltop.textsafe import one_line
from dltop.tui.results_view import BAR_MAX, FAILURE_STYLE, NA_STYLE


def row_label(table: Table, row: Row) -> str:
    """Every key cell of a row, in order: ``fcn-r torch 64 cpu:2`` (never cut, so rows
    that differ in one field never look alike)."""
    return " ".join(one_line(cell.text) for col, cell in zip(table.columns, row.cells,
                                                             strict=True)
                    if col.role is Role.KEY and cell is not None and cell.text)


def scaling_text(table: Table) -> Text:
    """The scaling table as plain aligned lines: bold title, headers over a rule.

    Drawn by hand, not as a Rich ``Table`` in a Static: Textual measured and rendered
    that table again on every visit to the results screen (its layout follows each
    restyle), 0.23 s of a profiled visit for 40 rows; these lines cost one join.
    Columns are as wide as their widest cell and never cut (the pane is as wide as the
    screen; wider lines are cropped at the right edge, as the pivot's are scrolled).
    """
    view = shown(table)  # as the exports' Markdown: 4 digits, each n/a reason once
    heads = [one_line(h) for h in view.headers]
    cells = [[one_line(text) + (superscript(k) if k else "") for text, k in r]
             for r in view.rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(heads)]
    left = [c.role is Role.KEY for c in table.columns]

    def line(values: Sequence[str]) -> str:
        return "  ".join(f"{v:<{w}}" if lft else f"{v:>{w}}"
                         for v, w, lft in zip(values, widths, left, strict=True)).rstrip()

    out = Text(no_wrap=True)
    out.append(one_line(view.title), "bold")
    out.append("\n")
    out.append(line(heads), "bold")
    out.append("\n" + "  ".join("─" * w for w in widths))
    for row in cells:
        out.append("\n" + line(row))
    for k, reason in enumerate(view.footnotes, 1):
        out.append(f"\n{superscript(k)} n/a: {one_line(reason)}", "dim")
    for said in table.caption:  # the columns left out (compute's settled)
        out.append(f"\n{one_line(said)}", "dim")
    return out


def speedup_chart(table: Table, width: int) -> Text:
    """Speedup as horizontal bars under full labels' column; ``|`` marks the ideal (N)."""
    keys = {c.key: i for i, c in enumerate(table.columns)}
    rows = [(row_label(table, r), r.cells[keys["speedup"]], int(r.extra.get("n_devices", 1)),
             str(r.extra.get("status", ""))) for r in table.rows]
    out = Text(no_wrap=True)
    out.append("speedup  (| = ideal: N devices)\n", "bold")
    if not rows:
        return out
    label_w = max(len(label) for label, *_ in rows)
    speedups = [float(c.value) for _, c, *_ in rows if c is not None and c.value is not None]
    top = max([*speedups, *(n for *_, n, _ in rows), 1.0])
    room = max(10, min(BAR_MAX, width - label_w - 10))
    scale = room / top
    for label, cell, n, status in rows:
        out.append(f"{label:<{label_w}} ")
        if cell is None or cell.value is None:
            out.append(status_label(status) if status != RunStatus.OK else "no 1-device run",
                       FAILURE_STYLE.get(status, NA_STYLE))
        else:
            value = float(cell.value)
            bar = "█" * round(value * scale)
            mark = round(n * scale)
            out.append(bar, "green")
            out.append(" " * max(0, mark - len(bar)) + ("|" if mark >= len(bar) else ""))
            out.append(f" {value:.2f}x")
        out.append("\n")
    out.rstrip()
    return out
