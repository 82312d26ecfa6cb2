"""Multi-statement writes are atomic: all of their rows, or none, and none seen before commit."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import overload

import pytest
import sqlite_utils

from dltop.store import Store
from dltop.store.queue import RunProcess
from dltop.store.tx import transaction

from .conftest import campaign, make_jobs


def count(db: sqlite_utils.Database, table: str) -> int:
    return int(next(db.query(f"select count(*) as n from {table}"))["n"])


class Interrupting(Sequence[str]):
    """Job statuses that call ``at_half`` when the writer reaches the middle of the list."""

    def __init__(self, n: int, at_half: Callable[[], None]) -> None:
        self._n, self._at_half = n, at_half

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            raise TypeError("no slices")
        if i == self._n // 2:
            self._at_half()
        return "queued"

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self._n))


def test_sqlite_utils_commits_each_call_inside_with_conn() -> None:
    # Why store.tx exists: `with db.conn:` opens no transaction in sqlite-utils 4.2.1,
    # so the first insert stays although the block raised.
    db = sqlite_utils.Database(memory=True)
    db.table("t").create({"x": int})
    with pytest.raises(RuntimeError), db.conn:
        db.table("t").insert({"x": 1})
        raise RuntimeError
    assert count(db, "t") == 1


def test_table_insert_inside_a_transaction_commits_nothing_on_its_own() -> None:
    db = sqlite_utils.Database(memory=True)
    db.table("t").create({"x": int})
    with pytest.raises(RuntimeError), transaction(db):
        db.table("t").insert({"x": 1})
        db.table("t").insert_all([{"x": 2}, {"x": 3}])
        assert db.conn.in_transaction
        raise RuntimeError
    assert count(db, "t") == 0


def test_add_jobs_interrupted_midway_stores_no_job(
        file_stores: Callable[[], Store]) -> None:
    writer, reader = file_stores(), file_stores()
    cid = writer.create_campaign("c", [], [], "host", 1, None)
    seen: list[int] = []

    def at_half() -> None:
        seen.append(count(reader.db, "jobs"))  # another connection, mid-way
        raise KeyboardInterrupt  # as Ctrl-C would, half-way through 100 jobs

    with pytest.raises(KeyboardInterrupt):
        writer.add_jobs(cid, make_jobs(100), Interrupting(100, at_half))
    assert seen == [0]  # the 50 inserted rows were not visible before a commit
    assert count(writer.db, "jobs") == count(reader.db, "jobs") == 0
    assert len(writer.add_jobs(cid, make_jobs(100))) == 100  # the connection still works
    assert count(reader.db, "jobs") == 100


def test_start_and_finish_run_write_run_and_job_together(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    with pytest.raises(sqlite_utils.db.NotFoundError):
        store.start_run(999, cid, 1, "", 8)  # the run row, then the missing job: neither
    assert count(store.db, "runs") == 0
    run = store.start_run(job, cid, 1, "", 8)
    with pytest.raises(sqlite_utils.db.NotFoundError):
        store.finish_run(run, 999, "ok", {"median_s": 1.0})
    assert store.db.table("runs").get(run)["status"] == "running"
    assert store.db.table("runs").get(run)["median_s"] is None
    with pytest.raises(sqlite_utils.db.NotFoundError):
        store.queue.mark_lost_and_requeue(RunProcess(run, 999, None, None, None))
    assert store.db.table("runs").get(run)["status"] == "running"


def test_store_calls_inside_one_transaction_commit_together(
        file_stores: Callable[[], Store]) -> None:
    writer, reader = file_stores(), file_stores()
    with pytest.raises(RuntimeError), writer.transaction():
        cid, _ = campaign(writer, 3)
        writer.set_campaign_status(cid, "running")
        assert count(reader.db, "campaigns") == 0
        raise RuntimeError
    assert count(writer.db, "campaigns") == count(writer.db, "jobs") == 0
    with writer.transaction():
        campaign(writer, 3)
    assert count(reader.db, "jobs") == 3


def test_a_transaction_holds_the_write_lock_from_its_start(
        file_stores: Callable[[], Store]) -> None:
    # BEGIN IMMEDIATE: a read-then-write cannot interleave with another writer.
    a, b = file_stores(), file_stores()
    b.db.conn.execute("PRAGMA busy_timeout=0")
    with a.transaction(), pytest.raises(sqlite3.OperationalError, match="locked"):
        b.set_control(1, "pause")
