"""SQLite store: schema, migrations, the single writer, and read queries."""

# Importing registers migration 2 (telemetry) beside migration 1.
from dltop.store import telemetry as _telemetry  # noqa: F401
from dltop.store.db import connect, memory_db, resolve_db_path
from dltop.store.writer import Store

__all__ = ["Store", "connect", "memory_db", "resolve_db_path"]
