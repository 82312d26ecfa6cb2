"""Multi-statement writes are atomic: all of their rows, or none, and none seen before commit."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import overload

import pytest
import sqlite_utils

from dltop.store import Store, connect
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


# several processes opening one database at once (issue 38) --------------------------
OPENER = """
import sys, time
from pathlib import Path
from dltop.store import connect
folder, rounds = Path(sys.argv[1]), int(sys.argv[2])
for r in range(rounds):
    print("ready", flush=True)
    while not (folder / f"go-{r}").exists():  # every opener starts within milliseconds
        time.sleep(0.001)
    try:
        connect(folder / f"r{r}.db").conn.close()
        print("ok", flush=True)
    except Exception as exc:
        print("failed", type(exc).__name__, exc, flush=True)
"""


@pytest.mark.slow  # spawns dltop or runner processes: over 1 s idle
def test_processes_creating_one_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    # Without the migrations' lock, 3 of 4 rounds had an opener die with
    # `table "schema_migrations" already exists` (or gpu_samples).
    from dltop.store.migrations import MIGRATIONS

    rounds, procs = 4, 4
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), str(rounds)],
                                stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    results: list[str] = []
    try:
        for r in range(rounds):
            for p in openers:
                assert p.stdout is not None
                while (line := p.stdout.readline().strip()) != "ready":
                    assert line, "an opener exited"
                    results.append(line)
            (tmp_path / f"go-{r}").touch()
        for p in openers:
            out, _ = p.communicate(timeout=120)
            results += out.split("\n")
    finally:
        for p in openers:
            p.kill()
            p.wait()
    assert [x for x in results if x] == ["ok"] * rounds * procs
    newest = max(m.version for m in MIGRATIONS)
    for r in range(rounds):
        conn = sqlite3.connect(tmp_path / f"r{r}.db")
        try:
            versions = [v for (v,) in conn.execute(
                "select version from schema_migrations order by version")]
            assert versions == list(range(1, newest + 1))
            assert conn.execute("pragma user_version").fetchone() == (newest,)
        finally:
            conn.close()


# vacuum while another connection reads (issue 38) -------------------------------------
READER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("begin")
conn.execute("select count(*) from campaigns").fetchone()  # holds its snapshot
print("reading", flush=True)
time.sleep(60)
"""


@pytest.mark.slow  # spawns dltop or runner processes: over 1 s idle
def test_vacuum_blocked_by_a_reader_says_so_and_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    store = Store(connect(db))
    cid, _ = campaign(store, 3)
    store.set_campaign_status(cid, "finished")  # no engine: only the reader is in the way
    store.db.conn.close()
    reader = subprocess.Popen([sys.executable, "-c", READER, str(db)], stdout=subprocess.PIPE,
                              text=True)
    env = {**os.environ, "DLTOP_BUSY_TIMEOUT_S": "0.5"}
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        blocked = subprocess.run([sys.executable, "-m", "dltop", "vacuum", "--db", str(db)],
                                 capture_output=True, text=True, timeout=60, env=env)
    finally:
        reader.kill()
        reader.wait()
    assert blocked.returncode == 1, blocked.stderr
    assert blocked.stdout == ""  # no "freed -132 kB"
    assert blocked.stderr.count("\n") == 1 and "blocked: another connection is reading" \
        in blocked.stderr and "Nothing was done" in blocked.stderr, blocked.stderr
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size < 64 * 1024  # no rebuilt copy in the WAL
    done = subprocess.run([sys.executable, "-m", "dltop", "vacuum", "--db", str(db)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and "freed " in done.stdout and "-" not in \
        done.stdout.split("freed ")[1], done
