"""The one transaction style of the store.

Every write of dltop's tables happens inside :func:`transaction`. It is needed
because sqlite-utils (4.2.1) leaves the connection in autocommit between its own
calls: ``with db.conn:`` opens no transaction, so each ``insert`` or ``update``
inside it commits on its own and a multi-statement write killed midway leaves
half its rows. Inside an open transaction, sqlite-utils' table methods use
savepoints and commit nothing, so the table API is safe to use here.

A connection an engine has fenced (:mod:`dltop.store.fence`) checks, first thing in
each transaction, that its engine still owns the campaign: one that lost it writes
nothing (:class:`~dltop.store.fence.OwnershipLost`).

Transactions are ``BEGIN IMMEDIATE``: the write lock is taken up front (waiting
up to the connection's busy timeout), so a read-then-write is atomic against
the other process (engine or viewer), and a deferred transaction can never fail
half-way with ``SQLITE_BUSY`` when its read lock cannot be upgraded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dltop.store import fence

if TYPE_CHECKING:  # annotations only: importing it costs ~0.1 s (see dltop.store.reader)
    import sqlite_utils


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """Run the block as one transaction: committed at the end, rolled back on any exception.

    Nested blocks become savepoints of the enclosing transaction (sqlite-utils'
    ``atomic``), so a repository method may be called inside a caller's larger
    transaction and commits nothing on its own.

    Raises:
        OwnershipLost: ``db`` is fenced and another engine owns its campaign now
            (nothing of the block is written).
    """
    if db.conn.in_transaction:
        with db.atomic():
            fence.check(db)  # the outer block's may not be ours: checked again, cheaply
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        fence.check(db)  # under the write lock: no takeover between it and the commit
        yield db
    except BaseException:
        db.rollback()
        raise
    try:
        db.conn.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


@contextmanager
def checkpoint_later(db: sqlite_utils.Database) -> Iterator[None]:
    """No automatic checkpoint while the block runs, its commits included.

    SQLite copies the write-ahead log into the database file at the first commit
    that finds it over 1000 pages. After a bulk insert (100 000 jobs, ~210 MB) that
    copy would hold up the campaign's first run by seconds; left to the engine's own
    checkpoint after each run (:meth:`dltop.store.writer.Store.checkpoint`), it
    happens once a run has ended. Readers are not affected: they read the log.
    """
    conn = db.conn
    pages = int(conn.execute("pragma wal_autocheckpoint").fetchone()[0])
    conn.execute("pragma wal_autocheckpoint = 0")
    try:
        yield
    finally:
        conn.execute(f"pragma wal_autocheckpoint = {pages}")
