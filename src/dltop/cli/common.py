"""What the command modules share: exit statuses, opening an existing database, and
output streams fitted to their encoding."""

from __future__ import annotations

import codecs
import sys
from typing import Any

EXIT_FAILED_RUNS = 1
EXIT_REGRESSION = 1
EXIT_SHORT_RUNS = 4
"""``dltop run``: no job failed, but one ended ``short`` (fewer measured iterations than
asked): its figures are not the measurement the profile asked for."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT) or ``dltop cancel``; another signal exits 128 + its number (the
shell's rule: 143 for SIGTERM, 129 for SIGHUP)."""


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


def db_list(db: str | list[str] | None) -> list[str | None]:
    """``--db`` as given: nothing (the default database), one path, or several (the
    reading commands take it more than once)."""
    if db is None or db == []:
        return [None]
    return [db] if isinstance(db, str) else list(db)


def open_reading(db: str | list[str] | None) -> Any:
    """A read-only connection over the databases ``--db`` names: one database as
    :func:`open_reader`, several as one study (:mod:`dltop.store.study`; a file named
    twice is read once, and said so)."""
    paths = db_list(db)
    if len(paths) == 1:
        return open_reader(paths[0])
    from dltop.store.study import open_study, unique_paths

    given = unique_paths([str(p) for p in paths])
    return open_reader(given[0]) if len(given) == 1 else open_study(given)


def one_db_for_run(db: str | list[str] | None, option: str = "--run") -> None:
    """Refuse a run id with several ``--db``: run ids are each database's own.

    Raises:
        UserError: ``--db`` names more than one database.
    """
    from dltop.errors import UserError

    if len(db_list(db)) > 1:
        raise UserError(f"{option} names a run of one database: give one --db (with "
                        "several, 'dltop runs' lists each run as FILE:RUN)")


def fit_output_encoding() -> None:
    """Let stdout and stderr write every character, in ASCII stand-ins where they must.

    Under ``PYTHONIOENCODING=latin-1`` or an ASCII locale, the ``†`` of an export or
    the ``…`` of ``dltop run``'s progress raised UnicodeEncodeError (a traceback, or
    progress lost). A stream whose encoding is not a Unicode one keeps its encoding and
    writes what it lacks as :func:`dltop.textsafe.stand_in` does (``†`` as ``+``,
    ``…`` as ``...``, others as ``\\u2603``). Streams that are not text files of the
    interpreter (a test's ``StringIO``) are left alone.
    """
    from dltop.textsafe import register_stand_ins

    errors = ""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        reconfigure = getattr(stream, "reconfigure", None)
        if not isinstance(encoding, str) or reconfigure is None:
            continue
        try:
            if codecs.lookup(encoding).name.startswith("utf"):
                continue
            errors = errors or register_stand_ins()
            reconfigure(errors=errors)
        except (LookupError, OSError, ValueError):
            continue  # an unknown codec or a closed stream: nothing to fit
