"""SQLite store: schema and migrations, the one write API (:class:`Store`), transactions."""

from dltop.store.db import connect, memory_db, resolve_db_path
from dltop.store.writer import Store

__all__ = ["Store", "connect", "memory_db", "resolve_db_path"]
