"""Several databases read as one (``--db A --db B`` on the reading commands), and the
staging step of ``dltop import``.

Every source is copied read-only (:func:`dltop.store.importer.snapshot`) and its
campaigns into one scratch database under new ids (:func:`stage`); a study is that
database in memory, its campaigns marked with where they came from
(``campaigns.study_ref``, ``FILE:ID``) so that the results layer, which reads one
connection, reads them all and names each as the user can address it
(:mod:`dltop.results.queries`). Hosts and GPU models become column keys as they do
across the campaigns of one database. A campaign found in two sources (the same UUID:
one file imported into the other) is read once.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop.errors import UserError
from dltop.store.importer import Copied, attached, copy_campaigns, snapshot
from dltop.store.read.campaigns import STUDY_TABLE
from dltop.store.tx import transaction


@dataclass(frozen=True)
class Source:
    """A source database of a study or an import, and its campaigns."""

    given: str
    """The path as given (``--db``)."""
    label: str
    """What ``FILE:ID`` writes as FILE: the stem, or the path where two stems are alike."""
    copied: tuple[Copied, ...] = ()


def unique_paths(given: Sequence[str], *, what: str = "--db") -> list[str]:
    """``given`` with every file named twice (the same real path) once; says so on stderr."""
    seen: dict[str, str] = {}
    out: list[str] = []
    for text in given:
        real = os.path.realpath(Path(text).expanduser())
        if real in seen:
            print(f"dltop: {what} {text} is {seen[real]} again: read once", file=sys.stderr)
            continue
        seen[real] = text
        out.append(text)
    return out


def labels(given: Sequence[str]) -> list[str]:
    """FILE of each source's ``FILE:ID``: its stem (``h100`` for ``runs/h100.db``), or the
    path as given when another source has the same stem."""
    stems = [Path(g).stem for g in given]
    return [s if stems.count(s) == 1 else g for s, g in zip(stems, given, strict=True)]


def stage(given: Sequence[str], into: Path, *, target: Path | None = None,
          absolute: bool = False) -> list[Source]:
    """Copy every campaign of each source into a new migrated database at ``into``.

    Args:
        absolute: record each campaign's ``origin_db`` as an absolute path (an import
            keeps it), else as given (a study shows it).

    Raises:
        UserError: a source that cannot be read (:func:`snapshot`); ``into`` is left
            partly written then (it is scratch).
    """
    import sqlite_utils

    from dltop.store import migrations

    conn = sqlite3.connect(str(into))
    db = sqlite_utils.Database(conn)
    migrations.apply(db)
    sources = []
    try:
        for i, (text, label) in enumerate(zip(given, labels(given), strict=True)):
            copy = snapshot(Path(text).expanduser(), into.parent / f"source-{i}.db",
                            target=target)
            origin = str(Path(text).expanduser().absolute()) if absolute else text
            with attached(db, copy), transaction(db):
                copied = copy_campaigns(db, copy, origin=origin, settled_only=False)
            os.unlink(copy)
            sources.append(Source(text, label, tuple(copied)))
    finally:
        conn.close()
    return sources


def open_study(given: Sequence[str]) -> Any:
    """One read-only connection over several databases' campaigns (a
    :class:`~dltop.store.reader.ReadDb` in memory: the sources are not held open).

    Raises:
        UserError: a source that cannot be read, or none has a campaign.
    """
    from dltop.store.reader import ReadDb

    with tempfile.TemporaryDirectory(prefix="dltop-study-") as tmp:
        staged = Path(tmp) / "study.db"
        sources = stage(given, staged)
        disk = sqlite3.connect(str(staged))
        mem = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            disk.backup(mem)
        finally:
            disk.close()
    refs = {c.new_id: f"{s.label}:{c.origin_id}" for s in sources for c in s.copied}
    for src in sources:
        for c in src.copied:
            if c.new_id is None:
                print(f"dltop: campaign {src.label}:{c.origin_id} `{c.name}` is "
                      f"{refs.get(c.same_as, '?')} (the same UUID): read once",
                      file=sys.stderr)
    with mem:
        mem.execute("alter table campaigns add column study_ref text")
        mem.execute(f"create table {STUDY_TABLE} (idx integer primary key, given text, "
                    "label text, run_offset integer, job_offset integer)")
        mem.executemany(f"insert into {STUDY_TABLE} values (?, ?, ?, ?, ?)",
                        [(i, s.given, s.label, *_offsets(s)) for i, s in enumerate(sources)])
        mem.executemany("update campaigns set study_ref = ? where id = ?",
                        [(f"{s.label}:{c.origin_id}", c.new_id) for s in sources
                         for c in s.copied if c.new_id is not None])
    if not mem.execute("select 1 from campaigns").fetchone():
        raise UserError("no campaigns in these databases yet: "
                        + ", ".join(s.given for s in sources))
    mem.execute("PRAGMA query_only=ON")
    return ReadDb(mem)


def _offsets(source: Source) -> tuple[int, int]:
    """The source's (run, job) id offsets in the study (each copy moves all its ids by
    one offset; 0 when none of its campaigns was copied)."""
    first = next((c for c in source.copied if c.new_id is not None), None)
    return (first.run_offset, first.job_offset) if first is not None else (0, 0)
