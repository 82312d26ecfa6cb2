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
