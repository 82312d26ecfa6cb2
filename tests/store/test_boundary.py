"""Only store/ writes dltop's tables: no write SQL, table writes or raw connections elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import dltop

SRC = Path(dltop.__file__).parent
WRITES = re.compile(
    r"\.conn\b"  # a raw connection: commits and transactions are the store's
    r"|\.(insert|insert_all|upsert|upsert_all|delete_where)\("  # sqlite-utils table writes
    r"|\b(insert\s+(or\s+\w+\s+)?into|update\s+\w+\s+set|delete\s+from)\b",  # write SQL
    re.IGNORECASE)


def test_no_module_outside_store_writes_the_database() -> None:
    found = [f"{path.relative_to(SRC)}:{n}: {line.strip()}"
             for path in sorted(SRC.rglob("*.py"))
             if path.parent.name != "store" and "child" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if WRITES.search(line)]
    assert found == []


def test_the_check_finds_writes() -> None:
    for line in ['db.conn.execute("x")', 'db["runs"].insert({})',
                 '"UPDATE runs SET status = ?"', "'insert or replace into t'"]:
        assert WRITES.search(line), line
    assert not WRITES.search('db.execute("pragma data_version")')
    assert not WRITES.search('db.query("select status from runs where id = ?", [1])')
