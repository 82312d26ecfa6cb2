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
Markdown also escapes HTML (``<`` as ``&lt;``: a renderer shows a label
``<img onerror=...>`` as text); CSV prefixes text a spreadsheet would take for a
formula with ``'`` (:func:`dltop.textsafe.formula_safe`) and says so in a ``#``
line; JSON never holds ``NaN`` or ``Infinity`` (``null``, and the reason where the
exports give reasons).
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from dltop.results.display import shown, superscript, without_unavailable
from dltop.results.table import Cell, Column, Layout, Role, Table
from dltop.textsafe import FORMULA_START, formula_safe, markdown_cell, markdown_text, one_line

FORMATS = ("md", "csv", "json", "latex")


def render(table: Table, fmt: str, *, every_column: bool = False) -> str:
    """The table as ``md``, ``csv``, ``json`` or ``latex`` text (ends with a newline).

    Markdown and LaTeX leave out a column that is ``n/a`` for one reason in every row,
    saying so (:func:`~dltop.results.display.without_unavailable`), unless
    ``every_column`` (the columns were named).

    Raises:
        ValueError: an unknown format.
    """
    if fmt == "md":
        return markdown(table if every_column else without_unavailable(table))
    if fmt == "csv":
        return to_csv(table)
    if fmt == "json":
        return to_json(table)
    if fmt == "latex":
        return latex(table if every_column else without_unavailable(table))
    raise ValueError(f"format must be one of {FORMATS}")


def _markdown_row(texts: list[str]) -> str:
    raw = " | ".join(texts)
    # Most rows need no escape: checked on the joined line (no ``|`` but the separators,
    # no control character, no HTML), not cell by cell (270 000 cells in a 10 000-row
    # summary).
    if raw.count("|") == len(texts) - 1 and "<" not in raw and "&" not in raw \
            and one_line(raw) == raw:
        return "| " + raw + " |"
    return "| " + " | ".join(map(markdown_cell, texts)) + " |"


def markdown(table: Table) -> str:
    """A pipe table under the title; under it the n/a reasons (each once, by its mark:
    :mod:`dltop.results.display`), the footnotes and the caption."""
    view = shown(table)
    lines = [markdown_text(view.title), "",
             "| " + " | ".join(map(markdown_cell, view.headers)) + " |",
             "|" + "|".join("---" if c.align == "l" else "---:" for c in table.columns) + "|"]
    lines += [_markdown_row([text + superscript(mark) if mark else text
                             for text, mark in row]) for row in view.rows]
    reasons = [f"{superscript(k)} n/a: {why}" for k, why in enumerate(view.footnotes, 1)]
    if reasons or table.notes or table.caption:
        lines += ["", *map(markdown_text, (*reasons, *table.notes, *table.caption))]
    return "\n".join(lines) + "\n"


STATUS_SUFFIX = " status"
"""CSV: each value column is followed by ``<header> status``, which holds its labels."""


FORMULA_NOTE = ("text cells that a spreadsheet would read as a formula (starting with =, +, "
                "-, @, a tab or a carriage return) begin with ' added by dltop")
"""CSV's ``#`` line when some cell got the quote (:func:`dltop.textsafe.formula_safe`)."""
NOT_FINITE = "n/a: not a finite number"
"""What a cell says instead of ``nan`` or ``inf`` (CSV's status column, JSON's label)."""


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def to_csv(table: Table) -> str:
    """``#`` comment lines (title, caption), a header row, one row per table row.

    Every value column holds only numbers (empty when there is none); the
    ``<header> status`` column after it says why a number is missing (``OOM``,
    ``n/a: no GPU``...) or, beside a number, the configuration's status (``ok``).
    Read it with ``pandas.read_csv(path, comment="#")``, or skip lines starting
    with ``#`` before :mod:`csv`. Text fields are on one line, and those a
    spreadsheet would run as a formula start with ``'`` (a ``#`` line says so, when
    there is one); numbers are written as numbers, negative ones too.
    """
    body = io.StringIO()
    w = csv.writer(body, lineterminator="\n")
    quoted = False

    def field(value: Any) -> Any:
        nonlocal quoted
        if not isinstance(value, str):
            return value if _finite(value) else ""
        safe = one_line(value)
        if not safe.startswith(FORMULA_START):  # most cells: no second look
            return safe
        kept = formula_safe(safe)
        quoted = quoted or kept is not safe
        return kept

    pivot = table.layout is Layout.PIVOT
    header: list[str] = []
    for c in table.columns:
        header += [c.header, c.header + STATUS_SUFFIX] if c.role is Role.VALUE else [c.header]
        header += [f"{c.header} {key}" for key in c.detail]
    w.writerow(map(field, header))
    for row in table.rows:
        out: list[Any] = []
        for col, cell in zip(table.columns, row.cells, strict=True):
            if col.role is Role.KEY:
                out.append("" if cell is None else cell.data)
            elif cell is None:
                out += ["", ""]
            elif cell.value is None:
                out += ["", cell.text]
            elif not _finite(cell.value):
                out += ["", f"{NOT_FINITE} ({cell.value})"]
            else:
                status = _with_flags(cell) if pivot else cell.status
                out += [cell.value, f"{status}; {cell.note}" if cell.note else status]
            out += ["" if cell is None or cell.detail.get(k) is None else cell.detail[k]
                    for k in col.detail]
        w.writerow(map(field, out))
    comments = (table.title, *table.caption, *((FORMULA_NOTE,) if quoted else ()))
    return "".join("# " + one_line(" ".join(line.splitlines())) + "\n"
                   for line in comments) + body.getvalue()


PIVOT_FLAGS = ("noisy", "packed", "shared", "contaminated", "client_bound",
               "oversubscribed", "mixed_versions", "incomplete")
"""A pivot cell's flags (its JSON fields) as its CSV status text names them."""


def _with_flags(cell: Cell) -> str:
    """A pivot cell's status with what its markers say (JSON's fields): the runs behind
    it and its flags, ``ok; n 1/2; noisy, incomplete``; a summary has columns for them."""
    d = cell.detail
    parts = [cell.status]
    if isinstance(d.get("n_runs"), int) and isinstance(d.get("repeats"), int):
        parts.append(f"n {d['n_runs']}/{d['repeats']}")
    if flags := [f.replace("_", "-") for f in PIVOT_FLAGS if d.get(f) is True]:
        parts.append(", ".join(flags))
    return "; ".join(parts)


def _column(col: Column) -> dict[str, Any]:
    return {"key": col.key, "header": col.header, "role": str(col.role), "unit": col.unit}


def to_json(table: Table) -> str:
    """``{"campaigns", "environment", meta..., "columns", "rows"}``, indented.

    ``columns`` describes every column (``key``, ``header``, ``role``, ``unit``). A
    flat table's row maps each column key to the cell's number (or text); a pivot
    table's row maps its key columns the same way and nests its value cells under
    ``"cells"``, each ``{value, status, label, detail...}``. A ``nan`` or ``inf`` is
    ``null`` (strict JSON has neither): a pivot cell's label then says
    :data:`NOT_FINITE`, a flat row's ``reasons`` does under the column key, and any
    other field is ``null``.
    """
    rows: list[dict[str, Any]] = []
    for row in table.rows:
        record: dict[str, Any] = {}
        nested: dict[str, Any] = {}
        reasons: dict[str, str] = {}
        for col, cell in zip(table.columns, row.cells, strict=True):
            if table.layout is Layout.PIVOT and col.role is Role.VALUE:
                nested[col.key] = None if cell is None else _json_cell(cell)
            elif col.role is Role.KEY:
                record[col.key] = None if cell is None else cell.data
            elif cell is not None and not _finite(cell.value):
                record[col.key] = None
                reasons[col.key] = f"{NOT_FINITE} ({cell.value})"
            else:
                record[col.key] = None if cell is None else cell.value
        if table.layout is Layout.PIVOT:
            record["cells"] = nested
        out = {**record, **row.extra}
        if reasons:  # beside the reasons the row gives (the summary's), if any
            out["reasons"] = {**row.extra.get("reasons", {}), **reasons}
        rows.append(out)
    doc: dict[str, Any] = {"campaigns": [], "environment": None, **table.meta,
                           "layout": str(table.layout),
                           "columns": [_column(c) for c in table.columns], "rows": rows}
    if table.caption:
        doc["caption"] = list(table.caption)
    return json_text(doc)


def _json_cell(cell: Cell) -> dict[str, Any]:
    """A pivot cell as JSON: ``{value, status, label, detail...}``."""
    if _finite(cell.value):
        return {"value": cell.value, "status": cell.status, "label": cell.text, **cell.detail,
                **({"note": cell.note} if cell.note else {})}
    return {"value": None, "status": cell.status, "label": f"{NOT_FINITE} ({cell.value})",
            **cell.detail}


def json_text(doc: Any) -> str:
    """``doc`` as indented, strict JSON: every ``nan`` and ``inf`` in it is ``null``.

    ``json.dumps(allow_nan=False)`` is the guard: what no table rule caught (a detail
    field, a meta value) is nulled here rather than written as ``NaN``, which
    ``jq``, JavaScript and most JSON readers refuse.
    """
    try:
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    except ValueError:  # rare: walk the document only when it holds one
        return json.dumps(_nulled(doc), indent=2, allow_nan=False) + "\n"


def _nulled(obj: Any) -> Any:
    """``obj`` with every non-finite float, however deep, as ``None``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _nulled(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nulled(v) for v in obj]
    if hasattr(obj, "items"):  # a read-only mapping (a cell's detail)
        return {k: _nulled(v) for k, v in obj.items()}
    return obj


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
    """A booktabs ``tabular`` after ``%`` comment lines (title, notes, caption); the n/a
    reasons, each once by its mark, in a footnote-sized paragraph after it."""
    view = shown(table)
    # the notes say what the cells' marks (*, †, (n/m)...) mean: a table pasted into a
    # paper without them would carry marks nobody can read
    lines = [f"% {latex_escape(line)}" for line in (table.comment or view.title,
                                                      *table.notes, *table.caption)]
    lines += [f"\\begin{{tabular}}{{{''.join(c.align for c in table.columns)}}}", "\\toprule",
              " & ".join(latex_escape(h) for h in view.latex_headers) + " \\\\", "\\midrule"]
    lines += [" & ".join(latex_escape(text) + (f"\\textsuperscript{{{mark}}}" if mark else "")
                         for text, mark in row) + " \\\\" for row in view.rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    if view.footnotes:
        lines += ["{\\footnotesize"]
        lines += [f"\\textsuperscript{{{k}}}n/a: {latex_escape(why)}\\par"
                  for k, why in enumerate(view.footnotes, 1)]
        lines += ["}"]
    return "\n".join(lines) + "\n"
