"""Opening the dltop database: path resolution, WAL, migrations.

SQLite is the single source of truth. Every write goes through the store's API
(:class:`dltop.store.writer.Store` and the repositories it owns), one
:func:`dltop.store.tx.transaction` each; readers may open their own connections.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from dltop.errors import UserError
from dltop.paths import data_dir
from dltop.store import migrations

if TYPE_CHECKING:  # imported where used: resolve_db_path serves read-only commands too
    import sqlite_utils

DB_ENV = "DLTOP_DB"


def default_db_path() -> Path:
    """``$XDG_DATA_HOME/dltop/dltop.db``, falling back to ``~/.local/share``."""
    return data_dir() / "dltop.db"


def resolve_db_path(cli_value: str | os.PathLike[str] | None) -> Path:
    """The database path: ``--db`` wins, then ``$DLTOP_DB``, then the XDG default."""
    if cli_value:
        return Path(cli_value).expanduser()
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env).expanduser()
    return default_db_path()


def connect(path: Path, *, create: bool = True) -> sqlite_utils.Database:
    """Open (and if needed create and migrate) the database at ``path``.

    Raises:
        UserError: the path cannot be created or written, is not SQLite, is
            a dltop database written by a newer dltop (refused before anything
            is written), or (with ``create=False``) does not exist or is not a
            dltop database.
    """
    import sqlite_utils

    path = Path(path)
    if not create:
        if not path.is_file():
            raise UserError(f"{path}: no such database (run 'dltop run' first, or pass --db)")
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"{path}: cannot create the database directory: {exc.strerror}"
            ) from None
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(f"{path}: the database file is not writable")
        if not path.exists() and not os.access(path.parent, os.W_OK):
            raise UserError(f"{path}: the directory {path.parent} is not writable")
    try:
        conn = sqlite3.connect(str(path), timeout=30.0, check_same_thread=False)
        db = sqlite_utils.Database(conn)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        names = db.table_names()
        if names and migrations.TABLE not in names:
            raise UserError(
                f"{path}: an SQLite file, but not a dltop database (no schema_migrations)")
        # Before anything is written (WAL included): a newer dltop's database is left as is.
        migrations.check_known(db)
        if create:
            db.enable_wal()
            conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: not a SQLite database ({exc})") from None
    except migrations.SchemaTooNew as exc:
        raise UserError(f"{path}: written by a newer dltop ({exc}); upgrade dltop to use it. "
                        "Nothing was written") from None
    if not create:
        if not names:
            raise UserError(f"{path}: empty file, not a dltop database")
        return db
    try:
        migrations.apply(db)
    except sqlite3.OperationalError as exc:
        raise UserError(f"{path}: cannot write the database: {exc}") from None
    return db


def memory_db() -> sqlite_utils.Database:
    """A migrated in-memory database, for tests."""
    import sqlite_utils

    db = sqlite_utils.Database(memory=True)
    migrations.apply(db)
    return db
