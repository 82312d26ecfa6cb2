"""Campaigns copied between databases with every row they own (``dltop import``, and the
one database a study of several ``--db`` reads: :mod:`dltop.store.study`).

A source is never written: it is opened read-only (a ``mode=ro`` URI), checked (a dltop
database, a schema this dltop knows, not damaged), and copied with SQLite's backup into
a scratch file that is migrated to today's schema; rows are then copied from that copy
with SQL (``ATTACH``), under new ids. Campaigns get dense new ids; jobs and runs keep
their order under an offset past the target's largest id, and every row that names one
(runs, iterations, samples, evaluations, generations, serve requests, operator profiles,
environment, run_archive, job templates and configurations) follows.

A campaign is known by its UUID (migration 25, :mod:`dltop.store.schema_origin`): one
the target already holds is not copied again. What the table copy depends on is listed
in :data:`RUN_TABLES` and :data:`CAMPAIGN_TABLES`; a test fails when a migration adds a
table neither lists nor :data:`NOT_OWNED` excuses.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dltop.catalog import ACTIVE_CAMPAIGN_STATUSES, CampaignStatus
from dltop.errors import UserError
from dltop.store.tx import transaction

RUN_TABLES = ("iterations", "environment", "gpu_samples", "host_samples", "run_archive",
              "evals", "profile_ops", "generations", "serve_requests")
"""Tables whose rows belong to a run (``run_id``), copied with their runs."""
CAMPAIGN_TABLES = ("job_templates", "job_configs")
"""Tables whose rows belong to a campaign (``campaign_id``) besides jobs and runs."""
NOT_OWNED = ("schema_migrations",)
"""Tables of no campaign: the target keeps its own."""
ROWID_TABLES = ("gpu_samples", "host_samples")
"""Tables without a primary key: rows copied in their stored order, new rowids."""
UNSETTLED = ACTIVE_CAMPAIGN_STATUSES | {CampaignStatus.FAILED}
"""Campaigns an import leaves out: an engine may still write them, or (``failed``)
``dltop run --resume`` would take up their queue in the target, on another host."""
FAULT_ENV = "DLTOP_IMPORT_FAULT"
"""A test hook: ``kill`` kills the process, ``raise`` raises, once the target's
transaction holds the first source's runs (an interrupted import)."""


@dataclass(frozen=True)
class Copied:
    """One source campaign and what became of it."""

    origin_id: int
    name: str
    uuid: str
    new_id: int | None
    """Its id in the target; None when it was not copied (see :attr:`skipped`)."""
    skipped: str = ""
    """Why not: already there (``campaign 4``), or still running."""
    same_as: int | None = None
    """The target's campaign of the same UUID (when skipped for it)."""
    run_offset: int = 0
    """Its runs' ids in the target less their ids in the source."""
    job_offset: int = 0
    """Its jobs' ids in the target less their ids in the source."""


def snapshot(path: Path, into: Path, *, target: Path | None = None) -> Path:
    """Check the source database ``path`` and copy it to ``into``, migrated.

    Raises:
        UserError: no such file; the target itself; not SQLite, not a dltop database, an
            empty file, a damaged (truncated) one, or one written by a newer dltop.
    """
    from dltop.store.db import dltop_tables, explained, ro_uri
    from dltop.store.reader import ReadDb

    path = Path(path)
    if path.is_dir():  # as one --db says it
        raise UserError(f"{path} is a directory, not a database file")
    if not path.is_file():
        raise UserError(f"{path}: no such database")
    if target is not None and target.exists() and os.path.samefile(path, target):
        raise UserError(f"{path}: is the target database itself (--db {target}); "
                        "import another database into it")
    with explained(path):
        src = sqlite3.connect(ro_uri(path), uri=True)
        try:
            try:
                dltop_tables(path, ReadDb(src), empty_ok=False)
            except sqlite3.DatabaseError as exc:
                if "malformed" not in str(exc):
                    raise
                problems = str(exc)  # the schema page itself is cut off
            else:
                problems = _damage(src)
            if problems:
                raise UserError(f"{path}: damaged database (truncated or corrupt: "
                                f"{problems}); nothing was read from it")
            out = sqlite3.connect(str(into))
            try:
                src.backup(out)
            finally:
                out.close()
        finally:
            src.close()
    migrate(into, path)
    return into


def _damage(conn: sqlite3.Connection) -> str:
    """What ``PRAGMA quick_check`` finds wrong (empty: nothing)."""
    try:
        found = [str(r[0]) for r in conn.execute("pragma quick_check(3)")]
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return "" if found == ["ok"] else "; ".join(found)


def migrate(copy: Path, source: Path) -> None:
    """Bring a scratch copy to today's schema (its source, for messages, is unchanged)."""
    import sqlite_utils

    from dltop.store import migrations

    conn = sqlite3.connect(str(copy))
    try:
        migrations.apply(sqlite_utils.Database(conn))
    except sqlite3.Error as exc:
        raise UserError(f"{source}: cannot be read as a dltop database ({exc})") from None
    finally:
        conn.close()


def copy_campaigns(db: Any, source: Path, *, origin: str | None, settled_only: bool,
                   fault: bool = False) -> list[Copied]:
    """Copy every campaign of the migrated copy ``source`` into ``db`` in the caller's
    transaction (``db`` is a ``sqlite_utils.Database`` with ``source`` attached as
    ``src``: see :func:`attached`).

    Args:
        origin: recorded as each campaign's ``origin_db`` (its ``origin_id`` the id it
            has in ``source``; relative log paths made absolute beside it); None keeps
            the rows' own origin (``source`` is a study's copy, already recorded).
        settled_only: leave out campaigns still queued, running, paused or waiting, and
            failed ones (:data:`UNSETTLED`).
        fault: the :data:`FAULT_ENV` hook's moment (tests).
    """
    conn = db.conn
    have = {r[0]: r[1] for r in conn.execute("select uuid, id from main.campaigns")}
    top = conn.execute("select coalesce(max(id), 0) from main.campaigns").fetchone()[0]
    out: list[Copied] = []
    mapping: list[tuple[int, int]] = []
    for cid, name, uuid, status in conn.execute(
            "select id, name, uuid, status from src.campaigns order by id").fetchall():
        if uuid in have:
            out.append(Copied(cid, name, uuid, None, f"already there as campaign {have[uuid]}",
                              have[uuid]))
        elif settled_only and status in UNSETTLED:
            out.append(Copied(cid, name, uuid, None, f"{status}: its queue can still be "
                              "resumed where it ran; import it once it ended, or read it "
                              "with several --db"))
        else:
            top += 1
            have[uuid] = top
            mapping.append((cid, top))
            out.append(Copied(cid, name, uuid, top))
    if not mapping:
        return out
    conn.execute("create temp table if not exists import_map (old integer primary key, "
                 "new integer not null)")
    conn.execute("delete from temp.import_map")
    conn.executemany("insert into temp.import_map values (?, ?)", mapping)
    off_job = _top(conn, "jobs")
    off_run = _top(conn, "runs")
    new_cid = "(select new from temp.import_map m where m.old = x.campaign_id)"
    of_camps = "x.campaign_id in (select old from temp.import_map)"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    camp = {"id": "(select new from temp.import_map m where m.old = x.id)",
            "cancel_run_id": f"x.cancel_run_id + {off_run}"}
    if origin is not None:
        camp.update(origin_db="?", origin_id="x.id", imported_at="?")
    _copy(conn, "campaigns", camp, "x.id in (select old from temp.import_map)",
          [origin, now] if origin is not None else [])
    _copy(conn, "job_templates", {"campaign_id": new_cid}, of_camps)
    _copy(conn, "jobs", {"id": f"x.id + {off_job}", "campaign_id": new_cid}, of_camps)
    # the jobs' insert triggers counted them again and rebuilt job_configs: the source's
    # own counts and configurations are the truth (a template job counts through them)
    conn.execute("delete from main.job_configs where campaign_id in "
                 "(select new from temp.import_map)")
    _copy(conn, "job_configs", {"campaign_id": new_cid}, of_camps)
    conn.execute("update main.campaigns set (jobs_counted, jobs_queued) = (select "
                 "s.jobs_counted, s.jobs_queued from src.campaigns s join temp.import_map m "
                 "on m.old = s.id where m.new = main.campaigns.id) "
                 "where id in (select new from temp.import_map)")
    run = {"id": f"x.id + {off_run}", "job_id": f"x.job_id + {off_job}", "campaign_id": new_cid}
    params: list[Any] = []
    if origin is not None:
        # an old database's relative run folder (paths.stored_path) resolved beside it
        run["log_path"] = ("case when coalesce(x.log_path, '') = '' or x.log_path like '/%' "
                           "then x.log_path else ? || '/' || x.log_path end")
        params.append(str(Path(origin).absolute().parent))
    _copy(conn, "runs", run, of_camps, params)
    of_runs = ("x.run_id in (select id from src.runs where campaign_id in "
               "(select old from temp.import_map))")
    for table in RUN_TABLES:
        _copy(conn, table, {"run_id": f"x.run_id + {off_run}"}, of_runs)
        if fault and table == RUN_TABLES[0]:
            _inject_fault()
    return [c if c.new_id is None else replace(c, run_offset=off_run, job_offset=off_job)
            for c in out]


def _top(conn: sqlite3.Connection, table: str) -> int:
    """The target's largest id of ``table``: copied ids start past it."""
    return int(conn.execute(f"select coalesce(max(id), 0) from main.{table}").fetchone()[0])


def _copy(conn: sqlite3.Connection, table: str, changed: dict[str, str], where: str,
          params: Sequence[Any] = ()) -> None:
    """``insert into main.table select ... from src.table x where ...``: the columns both
    have, those in ``changed`` computed by its expression (in column order, so its
    ``?`` take ``params`` in that order)."""
    mine = [r[1] for r in conn.execute(f"pragma main.table_info({table})")]
    theirs = {r[1] for r in conn.execute(f"pragma src.table_info({table})")}
    cols = [c for c in mine if c in theirs or c in changed]
    exprs = [changed.get(c, f"x.[{c}]") for c in cols]
    order = " order by x.rowid" if table in ROWID_TABLES else ""
    conn.execute(f"insert into main.{table} ({', '.join(f'[{c}]' for c in cols)}) "
                 f"select {', '.join(exprs)} from src.{table} x where {where}{order}",
                 list(params))


def _inject_fault() -> None:
    how = os.environ.get(FAULT_ENV, "")
    if how == "kill":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if how == "raise":
        raise RuntimeError(f"{FAULT_ENV}=raise: import interrupted")


@contextlib.contextmanager
def attached(db: Any, path: Path) -> Iterator[None]:
    """``path`` attached to ``db`` as ``src`` for the block (outside any transaction)."""
    db.conn.execute("attach database ? as src", [str(path)])
    try:
        yield
    finally:
        db.conn.execute("detach database src")


def import_file(target: Path, staging: Path, *, fault: bool = False) -> list[Copied]:
    """:func:`import_into` the database at ``target`` (created and migrated if needed),
    closed afterwards whatever happens."""
    from dltop.store.db import connect

    db = connect(target)
    try:
        return import_into(db, staging, fault=fault)
    finally:
        db.conn.close()


def import_into(db: Any, staging: Path, *, fault: bool = False) -> list[Copied]:
    """Copy every campaign of the staging database (a study of the sources,
    :func:`dltop.store.study.stage`) into ``db`` in ONE transaction: an interrupted
    import leaves ``db`` as it was.

    Campaigns the target already has (by UUID) and campaigns still open are left out
    (:attr:`Copied.skipped` says why).
    """
    with attached(db, staging), transaction(db):
        return copy_campaigns(db, staging, origin=None, settled_only=True, fault=fault)
