"""SQLite store: schema, migrations, the single writer, and read queries."""

from dltop.store.db import connect, memory_db, resolve_db_path
from dltop.store.writer import Store

__all__ = ["Store", "connect", "memory_db", "resolve_db_path"]
