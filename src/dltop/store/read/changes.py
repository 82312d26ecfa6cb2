"""Which database file a connection reads, and whether another connection changed it."""

from __future__ import annotations

from typing import Any


def data_version(db: Any) -> int:
    """SQLite's ``data_version``: it moves only when another connection commits, so a
    poller that sees it unchanged skips its read (idle costs one pragma)."""
    return int(db.execute("pragma data_version").fetchone()[0])


def main_file(db: Any) -> str:
    """The path of the connection's main database file ("" in memory)."""
    return next((str(r[2] or "") for r in db.execute("pragma database_list").fetchall()
                 if r[1] == "main"), "")
