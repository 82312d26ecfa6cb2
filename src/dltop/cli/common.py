"""What the command modules share: exit statuses and opening an existing database."""

from __future__ import annotations

from typing import Any

EXIT_FAILED_RUNS = 1
EXIT_REGRESSION = 1
EXIT_INTERRUPTED = 130


def open_existing(db: str | None) -> Any:
    """Connect to the database ``--db`` names (or the default one); it must exist."""
    from dltop.store import connect, resolve_db_path

    return connect(resolve_db_path(db), create=False)


def open_reader(db: str | None) -> Any:
    """A read-only connection to the database ``--db`` names (or the default one).

    For commands that only read: plain sqlite3 (:mod:`dltop.store.reader`), which
    starts ~0.1 s sooner than :func:`open_existing`'s sqlite-utils connection.
    """
    from dltop.store.db import resolve_db_path
    from dltop.store.reader import open_reader as open_

    return open_(resolve_db_path(db))
