"""A database as an older dltop left it, for the tests that open one with today's code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlite_utils

from dltop.store.migrations import MIGRATIONS, Migration


def migrated_to(path: Path, version: int,
                name: Callable[[Migration], str] = lambda m: m.name) -> sqlite_utils.Database:
    """Migrations 1..``version`` applied at ``path`` and recorded as applied (under
    ``name(m)``: a released name may since have been reworded), the later ones not;
    open, for the caller to add the rows the old code would have written."""
    db = sqlite_utils.Database(path)
    db.table("schema_migrations").create({"version": int, "name": str, "applied_at": str},
                                         pk="version")
    for m in MIGRATIONS[:version]:
        m.apply(db)
        db.execute("insert into schema_migrations values (?, ?, ?)",
                   [m.version, name(m), "2026-11-01T00:00:00Z"])
    return db
