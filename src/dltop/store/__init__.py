"""SQLite store: schema and migrations, the one write API (:class:`Store`), transactions.

The names below load on first use (PEP 562): importing a submodule such as
:mod:`dltop.store.reader` (the read-only connection of ``dltop status | runs |
export``) must not load sqlite-utils, which takes ~0.1 s and pulls in numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dltop.store.db import connect, memory_db, resolve_db_path
    from dltop.store.writer import Store

__all__ = ["Store", "connect", "memory_db", "resolve_db_path"]

_WHERE = {"Store": "dltop.store.writer", "connect": "dltop.store.db",
          "memory_db": "dltop.store.db", "resolve_db_path": "dltop.store.db"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value
