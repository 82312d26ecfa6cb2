"""Storage failures: transient locks retried, permanent errors turned into one clear line.

A write can fail two ways. *Transient*: another connection holds the write lock
longer than the busy timeout (``SQLITE_BUSY``/``SQLITE_LOCKED``, "database is
locked"): :func:`call` waits and tries the whole store call again, with back-off,
for up to :data:`RETRY_BUDGET_S` beyond the busy timeout. Every store method is
one transaction that rolled back when it failed, so trying it again is safe.
*Permanent*: the disk is full, the file is read-only or malformed, the schema
was changed under us, a value SQLite cannot hold: :class:`StorageError`, whose
message names the database and SQLite's reason.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from dltop.errors import DltopError

P = ParamSpec("P")
T = TypeVar("T")

RETRY_BUDGET_S = 120.0
"""How long a locked database is retried, on top of each attempt's busy timeout (30 s)."""
BACKOFF_MAX_S = 5.0

_TRANSIENT_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)


class StorageError(DltopError):
    """A database write or read failed for good (disk full, read-only, malformed...)."""

    exit_code = 1


def is_transient(exc: BaseException) -> bool:
    """True for a lock another connection holds (worth waiting for), False otherwise."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _TRANSIENT_CODES
    text = str(exc)
    return "database is locked" in text or "database table is locked" in text


def describe(exc: BaseException) -> str:
    """SQLite's reason in a few words (``database or disk is full``), for one line."""
    if isinstance(exc, OverflowError):
        return f"a value too large for SQLite ({exc})"
    return str(exc) or type(exc).__name__


def call(label: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, retrying while the database is locked.

    Args:
        label: the database, as the message should name it.

    Raises:
        StorageError: a permanent failure, or a lock held past the retry budget.
    """
    deadline = time.monotonic() + RETRY_BUDGET_S
    delay = 0.1
    while True:
        try:
            return fn(*args, **kwargs)
        except (sqlite3.Error, OverflowError) as exc:
            if is_transient(exc) and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(BACKOFF_MAX_S, delay * 2)
                continue
            raise StorageError(f"{label}: {describe(exc)}") from exc
