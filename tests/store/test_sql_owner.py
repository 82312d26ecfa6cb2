"""store/ is the one owner of SQL text (issue 39): every other module reads through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dltop

SRC = Path(dltop.__file__).parent
STATEMENT = re.compile(
    r"^\s*(select\s.+\sfrom\s|insert\s+(or\s+\w+\s+)?into\s|update\s+\w+\s+set\s"
    r"|delete\s+from\s|with\s+(recursive\s+)?\w+(\(.*?\))?\s+as\s*\("
    r"|create\s+(temp\s+|temporary\s+)?(table|index|view|trigger)"
    r"|drop\s+(table|index|view|trigger)|alter\s+table\s|pragma\s+\w+"
    r"|begin\s+(immediate|exclusive|deferred|transaction)|vacuum\s+into\s)", re.I | re.S)

def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in parts:
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):  # an f-string's literal parts, joined
            out.append((node.lineno, "".join(
                v.value for v in node.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str))))
    return out


def sql_outside_store() -> dict[str, list[str]]:
    """Each module outside store/ with SQL statement text: 'line: start of the text'."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("store/"):
            continue
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if STATEMENT.search(text):
                found.setdefault(rel, []).append(f"{line}: {text.strip()[:60]!r}")
    return found


def test_the_scan_finds_sql_in_every_form_it_is_written() -> None:
    tree = ast.parse('a = "select x from t"\nb = f"delete from {t} where 1"\n'
                     'c = """\n  with w as (select 1) select * from w"""\n'
                     'd = "pragma data_version"\ne = "Select the runs from this campaign"\n')
    hits = [t for _, t in _strings(tree) if STATEMENT.search(t)]
    assert len(hits) == 5  # e is prose that reads like a query: a false alarm is the cost
    assert not STATEMENT.search("vacuum: rebuilt") and not STATEMENT.search("update the queue")


def test_no_module_outside_store_holds_sql() -> None:
    found = sql_outside_store()
    assert not found, f"SQL outside store/ (move it into store/read/): {found}"
