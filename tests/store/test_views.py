"""The readers' shared views: what ``latest_runs`` holds, on a migrated database and on
one an older dltop wrote, which a read-only connection cannot migrate."""

from __future__ import annotations

from pathlib import Path

import sqlite_utils
from tests.store.conftest import campaign

from dltop.catalog import RunStatus
from dltop.results import idread
from dltop.store import Store, connect
from dltop.store.migrations import MIGRATIONS
from dltop.store.reader import open_reader
from dltop.store.views import LATEST_RUNS, VIEWS


def _runs(store: Store) -> tuple[int, list[int], dict[int, int]]:
    """Three jobs: the first run twice, the second once, the third never; job -> latest run."""
    cid, jobs = campaign(store, 3)
    first = store.start_run(jobs[0], cid, 1, "", 1)
    store.finish_run(first, jobs[0], RunStatus.CRASHED, {})
    again = store.start_run(jobs[0], cid, 2, "", 1)
    store.finish_run(again, jobs[0], RunStatus.OK, {"median_s": 0.5})
    once = store.start_run(jobs[1], cid, 1, "", 1)
    return cid, jobs, {jobs[0]: again, jobs[1]: once}


def test_latest_runs_holds_the_newest_run_of_each_job_that_ran(store: Store) -> None:
    cid, _, latest = _runs(store)
    rows = {r["job_id"]: r for r in store.db.query(
        f"select * from {LATEST_RUNS} where campaign_id = ?", [cid])}
    assert {j: r["id"] for j, r in rows.items()} == latest
    # every runs column, those of later migrations included
    assert set(next(iter(rows.values()))) == {c.name for c in store.db["runs"].columns}


def test_a_reader_of_an_older_database_gets_the_views_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    cid, jobs, latest = _runs(Store(connect(path)))
    old = sqlite_utils.Database(path)  # as the dltop before migration 21 left it
    newest = max(m.version for m in MIGRATIONS)
    for name in VIEWS:
        old.execute(f"drop view {name}")
    old.execute("delete from schema_migrations where version = ?", [newest])
    old.execute(f"pragma user_version = {newest - 1}")
    old.close()
    db = open_reader(path)
    try:
        assert list(idread.ran_identities(db, cid)) == jobs[:2]
        assert {r["job_id"]: r["id"] for r in db.query(
            f"select job_id, id from {LATEST_RUNS}")} == latest
        assert db.conn.execute("pragma query_only").fetchone()[0] == 1
    finally:
        db.close()
    kept = sqlite_utils.Database(path)
    assert not kept.view_names()  # temporary: nothing written to the file
    kept.close()


def test_an_unmigrated_open_for_reading_gets_them_too(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    cid, jobs, _ = _runs(Store(connect(path)))
    old = sqlite_utils.Database(path)
    for name in VIEWS:
        old.execute(f"drop view {name}")
    old.close()
    db = connect(path, create=False)  # the viewers' open: no migration
    assert list(idread.ran_identities(db, cid)) == jobs[:2]
    db.close()
