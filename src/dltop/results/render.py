"""Renderers of a :class:`~dltop.results.table.Table`: Markdown, CSV, JSON, LaTeX.

Each renderer reads only the table's columns, cells, notes and metadata, so
every results table (the pivot, the scaling table, whatever comes next) is
drawn by the same code. Display text goes to Markdown and LaTeX; numbers stay
numbers in CSV and JSON. The JSON schema and the CSV layout are documented in
docs/exports.md.

Text comes from profiles and programs (model labels, names, messages): its
control characters are escaped (:mod:`dltop.textsafe`) in Markdown, CSV and
LaTeX, so an export neither carries ``ESC`` to a terminal nor lets a newline or
a ``|`` break a Markdown row or a ``%`` comment line. JSON escapes them itself.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from dltop.results.table import Column, Layout, Role, Table
from dltop.textsafe import markdown_cell, one_line

FORMATS = ("md", "csv", "json", "latex")


def render(table: Table, fmt: str) -> str:
    """The table as ``md``, ``csv``, ``json`` or ``latex`` text (ends with a newline).

    Raises:
        ValueError: an unknown format.
    """
    if fmt == "md":
        return markdown(table)
    if fmt == "csv":
        return to_csv(table)
    if fmt == "json":
        return to_json(table)
    if fmt == "latex":
        return latex(table)
    raise ValueError(f"format must be one of {FORMATS}")


def _texts(table: Table) -> list[list[str]]:
    return [[c.text if c else "" for c in row.cells] for row in table.rows]


def _markdown_row(texts: list[str]) -> str:
    raw = " | ".join(texts)
    # Most rows need no escape: checked on the joined line (no ``|`` but the separators,
    # no control character), not cell by cell (270 000 cells in a 10 000-row summary).
    if raw.count("|") == len(texts) - 1 and one_line(raw) == raw:
        return "| " + raw + " |"
    return "| " + " | ".join(map(markdown_cell, texts)) + " |"


def markdown(table: Table) -> str:
    """A pipe table under the title, footnotes and caption below it."""
    lines = [one_line(table.title), "",
             "| " + " | ".join(markdown_cell(c.header) for c in table.columns) + " |",
             "|" + "|".join("---" if c.align == "l" else "---:" for c in table.columns) + "|"]
    lines += [_markdown_row(texts) for texts in _texts(table)]
    if table.notes or table.caption:
        lines += ["", *map(one_line, (*table.notes, *table.caption))]
    return "\n".join(lines) + "\n"


STATUS_SUFFIX = " status"
"""CSV: each value column is followed by ``<header> status``, which holds its labels."""


def to_csv(table: Table) -> str:
    """``#`` comment lines (title, caption), a header row, one row per table row.

    Every value column holds only numbers (empty when there is none); the
    ``<header> status`` column after it says why a number is missing (``OOM``,
    ``n/a: no GPU``...) or, beside a number, the configuration's status (``ok``).
    Read it with ``pandas.read_csv(path, comment="#")``, or skip lines starting
    with ``#`` before :mod:`csv`.
    """
    buf = io.StringIO()
    for line in (table.title, *table.caption):
        buf.write("# " + one_line(" ".join(line.splitlines())) + "\n")
    w = csv.writer(buf, lineterminator="\n")
    header: list[str] = []
    for c in table.columns:
        header += [c.header, c.header + STATUS_SUFFIX] if c.role is Role.VALUE else [c.header]
        header += [f"{c.header} {key}" for key in c.detail]
    w.writerow(map(one_line, header))
    for row in table.rows:
        out: list[Any] = []
        for col, cell in zip(table.columns, row.cells, strict=True):
            if col.role is Role.KEY:
                out.append("" if cell is None else cell.data)
            elif cell is None:
                out += ["", ""]
            elif cell.value is None:
                out += ["", cell.text]
            else:
                out += [cell.value, cell.status]
            out += ["" if cell is None or cell.detail.get(k) is None else cell.detail[k]
                    for k in col.detail]
        w.writerow(one_line(v) if isinstance(v, str) else v for v in out)
    return buf.getvalue()


def _column(col: Column) -> dict[str, Any]:
    return {"key": col.key, "header": col.header, "role": str(col.role), "unit": col.unit}


def to_json(table: Table) -> str:
    """``{"campaigns", "environment", meta..., "columns", "rows"}``, indented.

    ``columns`` describes every column (``key``, ``header``, ``role``, ``unit``). A
    flat table's row maps each column key to the cell's number (or text); a pivot
    table's row maps its key columns the same way and nests its value cells under
    ``"cells"``, each ``{value, status, label, detail...}``.
    """
    rows: list[dict[str, Any]] = []
    for row in table.rows:
        record: dict[str, Any] = {}
        nested: dict[str, Any] = {}
        for col, cell in zip(table.columns, row.cells, strict=True):
            if table.layout is Layout.PIVOT and col.role is Role.VALUE:
                nested[col.key] = None if cell is None else {
                    "value": cell.value, "status": cell.status, "label": cell.text,
                    **cell.detail}
            elif col.role is Role.KEY:
                record[col.key] = None if cell is None else cell.data
            else:
                record[col.key] = None if cell is None else cell.value
        if table.layout is Layout.PIVOT:
            record["cells"] = nested
        rows.append({**record, **row.extra})
    doc: dict[str, Any] = {"campaigns": [], "environment": None, **table.meta,
                           "layout": str(table.layout),
                           "columns": [_column(c) for c in table.columns], "rows": rows}
    if table.caption:
        doc["caption"] = list(table.caption)
    return json.dumps(doc, indent=2) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "†": r"\textdagger{}",
                  "‡": r"\textdaggerdbl{}", "§": r"\S{}", "|": r"\textbar{}",
                  "<": r"\textless{}", ">": r"\textgreater{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters, control characters first (one line: a newline
    would end a ``%`` comment and let the rest be typeset)."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in one_line(text))


def latex(table: Table) -> str:
    """A booktabs ``tabular`` after ``%`` comment lines (title, caption)."""
    head = [c.latex_header or c.header for c in table.columns]
    lines = [f"% {latex_escape(line)}" for line in (table.comment or table.title,
                                                      *table.caption)]
    lines += [f"\\begin{{tabular}}{{{''.join(c.align for c in table.columns)}}}", "\\toprule",
             " & ".join(latex_escape(h) for h in head) + " \\\\", "\\midrule"]
    lines += [" & ".join(latex_escape(t) for t in texts) + " \\\\" for texts in _texts(table)]
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"
