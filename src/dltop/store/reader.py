"""A read-only connection for commands that only read: ``dltop status | runs | export``.

:func:`dltop.store.db.connect` wraps the connection in a ``sqlite_utils.Database``,
and importing sqlite-utils alone takes about 0.1 s (0.15 s more when numpy is
installed, which it imports at module level), more than such a command does.
:class:`ReadDb` is plain :mod:`sqlite3` offering the part of that class's API that
the read code (:mod:`dltop.results`, :mod:`dltop.live`) uses: :meth:`ReadDb.query`,
:meth:`ReadDb.execute`, :meth:`ReadDb.table_names` and ``conn``. It refuses every
write (``PRAGMA query_only``) and checks the file as ``connect(create=False)``
does, with the same messages.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import sqlite_utils

Params = Iterable[Any] | dict[str, Any] | None


class ReadDb:
    """A read-only dltop database connection (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, parameters: Params = None) -> sqlite3.Cursor:
        """Run one statement; the cursor's rows are tuples."""
        if parameters is None:
            return self.conn.execute(sql)
        return self.conn.execute(sql, parameters if isinstance(parameters, dict)
                                 else tuple(parameters))

    def query(self, sql: str, params: Params = None) -> Iterator[dict[str, Any]]:
        """The rows of a ``select`` as dicts keyed by column name, as sqlite-utils gives."""
        cursor = self.execute(sql, params)
        keys = [d[0] for d in cursor.description]
        for row in cursor:
            yield dict(zip(keys, row, strict=True))

    def table_names(self) -> list[str]:
        """Names of the database's tables."""
        return [r[0] for r in self.conn.execute(
            "select name from sqlite_master where type = 'table'")]

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


Db: TypeAlias = "sqlite_utils.Database | ReadDb"
"""What the read code takes: the writer's connection or a :class:`ReadDb`."""


def open_reader(path: Path) -> ReadDb:
    """Open an existing dltop database for reading.

    Raises:
        UserError: the file does not exist, is not SQLite, is not a dltop database,
            or was written by a newer dltop.
    """
    from dltop.store.db import (  # light: no sqlite-utils
        busy_timeout_s,
        dltop_tables,
        existing_database_file,
        explained,
        ro_uri,
        same_file,
        side_files_refused,
    )
    from dltop.store.views import ensure_views

    path = Path(path)
    ident = existing_database_file(path)  # a regular file: no link, no directory
    with explained(path):
        wait_s = busy_timeout_s()
        # a committed database on a read-only directory or medium (an archive, a
        # read-only share) is read as a study reads it; a plain connection would need
        # to create its -wal and -shm there
        target, uri = (ro_uri(path), True) if ident is not None \
            and side_files_refused(path) else (str(path), False)
        conn = sqlite3.connect(target, timeout=wait_s, check_same_thread=False, uri=uri)
        conn.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
        db = ReadDb(conn)
        dltop_tables(path, db, empty_ok=False)
        same_file(path, ident)
        # a database an older dltop wrote has not the readers' views yet: temporary
        # ones, created before query_only (which refuses even those)
        ensure_views(conn)
        conn.execute("PRAGMA query_only=ON")
    return db
