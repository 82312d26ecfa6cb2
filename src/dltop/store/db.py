"""Opening the dltop database: path resolution, WAL, migrations.

SQLite is the single source of truth. Every write goes through the store's API
(:class:`dltop.store.writer.Store` and the repositories it owns), one
:func:`dltop.store.tx.transaction` each; readers may open their own connections.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop.errors import UserError
from dltop.paths import data_dir
from dltop.store import migrations
from dltop.store.guard import is_transient
from dltop.store.views import ensure_views

if TYPE_CHECKING:  # imported where used: resolve_db_path serves read-only commands too
    import sqlite_utils

DB_ENV = "DLTOP_DB"


BUSY_TIMEOUT_ENV = "DLTOP_BUSY_TIMEOUT_S"


def busy_timeout_s() -> float:
    """How long a connection waits for another's write lock: 30 s, or
    ``$DLTOP_BUSY_TIMEOUT_S`` (a test hook: the lock tests hold a lock past it)."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else 30.0
    except ValueError:
        value = 30.0
    return value if value > 0 else 30.0


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


def connect(path: Path, *, create: bool = True,
            migrate: bool | None = None) -> sqlite_utils.Database:
    """Open (and if needed create and migrate) the database at ``path``.

    ``migrate`` (default: ``create``) with ``create=False`` migrates an existing
    database without creating one: ``dltop run --resume`` writes as an engine does, so
    its campaign gets the columns every write needs (the ownership fence, issue 38).

    Raises:
        UserError: the path cannot be created or written, is not SQLite, is
            a dltop database written by a newer dltop (refused before anything
            is written), or (with ``create=False``) does not exist or is not a
            dltop database.
    """
    import sqlite_utils

    path = Path(path)
    if not create:
        ident = existing_database_file(path)
    else:
        try:
            # dltop's own directory is user-only; an existing one is left as it is
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"{path}: cannot create the database directory: {exc.strerror}"
            ) from None
        found = database_file(path)
        if found is not None and not os.access(path, os.W_OK):
            raise UserError(f"{path}: the database file is not writable")
        if found is None and not os.access(path.parent, os.W_OK):
            raise UserError(f"{path}: the directory {path.parent} is not writable")
        ident = found if found is not None else _create_private(path)
    with explained(path):
        wait_s = busy_timeout_s()
        conn = sqlite3.connect(str(path), timeout=wait_s, check_same_thread=False)
        db = sqlite_utils.Database(conn)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
        # Before anything is written (WAL included): a newer dltop's database is left as is.
        dltop_tables(path, db, empty_ok=create)
        same_file(path, ident)  # SQLite opens by name: still the file checked above?
        migrate = create if migrate is None else migrate
        if migrate:
            _enable_wal(conn, wait_s)
            conn.execute("PRAGMA synchronous=NORMAL")
        else:  # not migrated: an older database reads through temporary views instead
            ensure_views(conn)
    if not migrate:
        return db
    try:
        migrations.apply(db)
    except sqlite3.OperationalError as exc:
        raise UserError(f"{path}: cannot write the database: {exc}") from None
    except migrations.SchemaTooNew as exc:  # a newer dltop migrated it while we waited
        raise UserError(f"{path}: written by a newer dltop ({exc}); upgrade dltop to use "
                        "it. Nothing was written") from None
    check_schema(db, path)
    return db


def _enable_wal(conn: sqlite3.Connection, wait_s: float) -> None:
    """Switch to WAL, waiting out another opener's lock for up to ``wait_s``.

    The switch needs the file to itself, and SQLite answers it "database is locked" at
    once, without the busy handler, while another process opening the same new file
    holds a lock (tests/store/test_transactions.py's four openers of one new file failed
    in 3 of 6 runs before this).
    Once one has switched, the others find WAL already set (no lock needed).
    """
    deadline, delay = time.monotonic() + wait_s, 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=wal")
            return
        except sqlite3.OperationalError as exc:
            if not is_transient(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(0.25, delay * 2)


@contextlib.contextmanager
def explained(path: Path) -> Iterator[None]:
    """Opening ``path``: SQLite's errors and a newer schema become one clear UserError."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise UserError(open_failure_message(path, exc)) from None
    except migrations.SchemaTooNew as exc:
        raise UserError(f"{path}: written by a newer dltop ({exc}); upgrade dltop to use it. "
                        "Nothing was written") from None


def dltop_tables(path: Path, db: Any, *, empty_ok: bool = True) -> list[str]:
    """``db``'s table names, once it is known to be a dltop database this dltop can read.

    Args:
        path: the file, for messages.
        db: a ``sqlite_utils.Database`` or a read-only ``ReadDb`` (same query API).
        empty_ok: an empty file is a database still to be created.

    Raises:
        UserError: an SQLite file of something else, an empty file (unless
            ``empty_ok``), or a schema newer than this dltop's (via :func:`explained`).
    """
    names: list[str] = db.table_names()
    if names and migrations.TABLE not in names:
        raise UserError(
            f"{path}: an SQLite file, but not a dltop database (no schema_migrations)")
    if not names and not empty_ok:
        raise UserError(f"{path}: empty file, not a dltop database")
    migrations.check_known(db)
    return names


FileId = tuple[int, int]
"""A file's (device, inode): the file a database path named when it was checked."""


def existing_database_file(path: Path) -> FileId:
    """:func:`database_file` of a database that must be there.

    Raises:
        UserError: no such file, or what :func:`database_file` refuses.
    """
    ident = database_file(path)
    if ident is None:
        raise UserError(f"{path}: no such database (run 'dltop run' first, or pass --db)")
    return ident


def database_file(path: Path) -> FileId | None:
    """Check that ``path`` can be a database file: a regular file, or nothing yet.

    dltop never opens or creates a database through a symbolic link as the last
    component (a link planted where a database will be would make SQLite create
    or write its target; a symlinked parent directory is fine), as it never writes
    a run file through one.

    Returns:
        The file's identity (device, inode), or None when nothing is there.

    Raises:
        UserError: a symbolic link (dangling or not), a directory, another kind of
            file, or a path that cannot be looked at.
    """
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # creating it says what is in the way
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot open the database: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        raise UserError(f"{path}: a symbolic link{target}, not a database file; dltop never "
                        "opens or creates a database through a link: pass the real path")
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is a directory, not a database file")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: not a regular file, not a database file")
    return (st.st_dev, st.st_ino)


def same_file(path: Path, ident: FileId) -> None:
    """Refuse a database path replaced (by a link, another file) since it was checked.

    Raises:
        UserError: ``path`` is no longer the file ``ident`` names.
    """
    if database_file(path) != ident:
        raise UserError(f"{path}: the database file was replaced while dltop opened it; "
                        "nothing was written")


def _create_private(path: Path) -> FileId:
    """Create an empty database file readable by its user only (0600, whatever the
    umask), never through a link; SQLite gives its ``-wal`` and ``-shm`` files the
    database file's mode. Another process creating it at the same moment is fine:
    its file is used (once checked)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:  # another engine made it meanwhile, or a link was planted
        return existing_database_file(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot create the database: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino)


def ro_uri(path: Path) -> str:
    """A ``file:`` URI opening ``path`` read-only: SQLite writes nothing to it.

    A WAL database read with ``mode=ro`` alone still gets a ``-wal`` and a ``-shm`` file
    created beside it (a committed, checkpointed database in a repository gained two
    untracked files). Without a ``-wal`` file every committed page is in the database
    file, and ``immutable=1`` reads it with no side file and no lock; with one (a
    database in use), ``mode=ro`` reads through it.
    """
    quoted = "file:" + urllib.parse.quote(str(Path(path).absolute())) + "?mode=ro"
    return quoted if Path(f"{path}-wal").exists() else quoted + "&immutable=1"


def side_files_refused(path: Path) -> bool:
    """Whether ``path`` must be read without the ``-wal`` and ``-shm`` files a plain
    connection makes: its directory takes no new file (read-only, or a read-only file
    system) and no ``-wal`` is there, so every committed page is in the file itself
    (:func:`ro_uri` then reads it ``immutable``, as a study reads its databases)."""
    return not os.access(path.parent, os.W_OK | os.X_OK) \
        and not Path(f"{path}-wal").exists()


def open_failure_message(path: Path, exc: sqlite3.DatabaseError) -> str:
    """What went wrong opening ``path``, for the user: not every error means "not SQLite"."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
        if not os.access(path.parent, os.W_OK | os.X_OK):
            # WAL: SQLite creates <db>-wal and <db>-shm beside the file, even to read it
            return (f"{path}: cannot open the database: the directory {path.parent} is not "
                    f"writable (SQLite needs to create {path.name}-wal and {path.name}-shm "
                    "there, even to read)")
        return f"{path}: cannot open the database ({exc})"
    return f"{path}: not a SQLite database ({exc})"


def check_schema(db: sqlite_utils.Database, path: Path) -> None:
    """Refuse a database whose tables lack columns dltop's migrations made.

    Raises:
        UserError: a column was renamed or dropped outside dltop (named in the message).
    """
    missing = migrations.missing_columns(db)
    if missing:
        raise UserError(f"{path}: the schema was changed outside dltop (missing "
                        f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}); "
                        "dltop will not write to it")


def explain_failure(path: Path, exc: BaseException) -> tuple[str, int]:
    """One line (and an exit status) for a database error a command ran into.

    A query that failed on a missing column is explained by the schema (exit 2,
    like any database dltop refuses); anything else is SQLite's reason with the
    database's path (exit 1).
    """
    if "no such column" in str(exc) or "has no column" in str(exc):
        import sqlite_utils

        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                ro = sqlite_utils.Database(conn)
                missing = migrations.missing_columns(ro)
                have = max(migrations.applied_versions(ro), default=0)
            finally:
                conn.close()
        except sqlite3.Error:
            missing, have = [], 0
        newest = max(m.version for m in migrations.MIGRATIONS)
        if missing and have < newest:
            return (f"{path}: written by an older dltop (schema version {have}, this dltop "
                    f"has {newest}); a command that writes (dltop run) upgrades it: {exc}", 2)
        if missing:
            return (f"{path}: the schema was changed outside dltop (missing "
                    f"{', '.join(missing[:5])}): {exc}", 2)
    return f"{path}: database error: {exc}", 1


def memory_db() -> sqlite_utils.Database:
    """A migrated in-memory database, for tests."""
    import sqlite_utils

    db = sqlite_utils.Database(memory=True)
    migrations.apply(db)
    return db
