"""What a database's schema holds, asked once per connection and schema change.

Readers of databases written by older dltop versions branch on a table or a column
being there. The answer is cached on the connection object, keyed by SQLite's
``schema_version`` (which any ``CREATE``/``ALTER`` bumps), so a migration run on the
same connection is seen and a read pays one cheap pragma instead of a catalogue scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_ATTR = "_dltop_schema_facts"


@dataclass
class _Facts:
    version: int
    tables: frozenset[str]
    columns: dict[str, frozenset[str]] = field(default_factory=dict)


def _facts(db: Any) -> _Facts:
    version = int(db.execute("pragma schema_version").fetchone()[0])
    facts: _Facts | None = getattr(db, _ATTR, None)
    if facts is None or facts.version != version:
        names = frozenset(r[0] for r in db.execute(
            "select name from sqlite_master where type in ('table', 'view') "
            "union all select name from sqlite_temp_master where type = 'view'"))
        facts = _Facts(version, names)
        setattr(db, _ATTR, facts)
    return facts


def has_table(db: Any, name: str) -> bool:
    """Whether the database has the table (or view) ``name``."""
    return name in _facts(db).tables


def columns(db: Any, table: str) -> frozenset[str]:
    """The column names of ``table`` (empty when there is no such table)."""
    facts = _facts(db)
    if table not in facts.columns:
        facts.columns[table] = frozenset(
            r[1] for r in db.execute(f"pragma table_info({table!r})"))
    return facts.columns[table]
