"""Renderers of a :class:`~dltop.results.table.Table`: Markdown, CSV, JSON, LaTeX.

Each renderer reads only the table's columns, cells, notes and metadata, so
every results table (the pivot, the scaling table, whatever comes next) is
drawn by the same code. Display text goes to Markdown and LaTeX; numbers stay
numbers in CSV and JSON.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from dltop.results.table import Layout, Role, Table

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


def markdown(table: Table) -> str:
    """A pipe table under the title, footnotes below it."""
    lines = [table.title, "", "| " + " | ".join(c.header for c in table.columns) + " |",
             "|" + "|".join("---" if c.align == "l" else "---:" for c in table.columns) + "|"]
    lines += ["| " + " | ".join(texts) + " |" for texts in _texts(table)]
    if table.notes:
        lines += ["", *table.notes]
    return "\n".join(lines) + "\n"


def to_csv(table: Table) -> str:
    """A header row and one row per table row; numbers exact, statuses as labels."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c.header for c in table.columns])
    for row in table.rows:
        w.writerow(["" if c is None else c.data for c in row.cells])
    return buf.getvalue()


def to_json(table: Table) -> str:
    """``{meta..., "columns"?, "rows": [...]}``, indented.

    A flat table's row maps each column key to the cell's number (or text); a
    pivot table's row maps its key columns the same way and nests its value
    cells under ``"cells"``, each ``{value, status, label, detail...}``, and the
    document lists the value columns under ``"columns"``.
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
    doc: dict[str, Any] = dict(table.meta)
    if table.layout is Layout.PIVOT:
        doc["columns"] = [c.key for c in table.columns if c.role is Role.VALUE]
    doc["rows"] = rows
    return json.dumps(doc, indent=2) + "\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "†": r"\textdagger{}",
                  "‡": r"\textdaggerdbl{}", "§": r"\S{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def latex(table: Table) -> str:
    """A booktabs ``tabular`` after a ``%`` comment line."""
    head = [c.latex_header or c.header for c in table.columns]
    lines = [f"% {latex_escape(table.comment or table.title)}",
             f"\\begin{{tabular}}{{{''.join(c.align for c in table.columns)}}}", "\\toprule",
             " & ".join(latex_escape(h) for h in head) + " \\\\", "\\midrule"]
    lines += [" & ".join(latex_escape(t) for t in texts) + " \\\\" for texts in _texts(table)]
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"
