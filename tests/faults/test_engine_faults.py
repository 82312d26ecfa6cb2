"""Issue 20, engine and storage faults: each case with a real `dltop run` and real SQLite files.

The runner is a scripted child: ``$DLTOP_PYTHON_COMMAND`` points at a shell script
that runs the real Python for the interpreter probe (``-c``) and otherwise a small
program that writes the event lines a test planned, per model label, to the event
pipe. The engine cannot tell it from a runner that went wrong, which is the point.
docs/faults.md lists the cases (section "Engine and storage").
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.dltop_env import fake_python, query

from dltop.store.db import BUSY_TIMEOUT_ENV

pytestmark = pytest.mark.slow  # engines (`dltop run`) on broken databases and disks

EMITTER = """\
import json, os, sys, time
spec = json.load(open(sys.argv[-1]))
plan = json.load(open(os.environ["FAULT_PLAN"]))[spec["model"]]
fd = int(os.environ["DLTOP_EVENT_FD"])
for item in plan:
    if isinstance(item, dict):
        time.sleep(item["sleep"])
    else:
        os.write(fd, (item + "\\n").encode())
"""

Plan = list[Any]  # raw event lines (str) and {"sleep": seconds}


def ev(name: str, **fields: Any) -> str:
    return json.dumps({"v": 1, "event": name, **fields})


def hello() -> str:
    return ev("hello", framework="command", framework_version="1", python_version="3",
              device="cpu", threads=1, pid=os.getpid())


def it(index: Any, seconds: Any = 0.01, *, samples: Any = 8, warmup: bool = False,
       loss: Any = 1.0) -> str:
    return ev("iter", index=index, seconds=seconds, samples=samples, warmup=warmup, loss=loss,
              t_mono_ns=time.monotonic_ns())


def good_run(n: int = 4, sleep_s: float = 0.0) -> Plan:
    """hello, one warm-up and ``n - 1`` measured iterations, done."""
    out: Plan = [hello(), ev("model", param_count=10, flops_per_sample=None)]
    for i in range(n):
        out.append(it(i, 0.01 + i / 1000, warmup=i == 0))
        if sleep_s:
            out.append({"sleep": sleep_s})
    return [*out, ev("done", iterations=n - 1)]


class Campaign:
    """A database path, a profile of scripted jobs and the `dltop` commands around them."""

    def __init__(self, tmp: Path, plans: dict[str, Plan], *, timeout_s: float = 60,
                 db: Path | None = None) -> None:
        self.tmp = tmp
        self.db = db or tmp / "d.db"
        (tmp / "emit.py").write_text(EMITTER)
        fake = fake_python(tmp / "fake-python", tmp / "emit.py")
        self.plan = tmp / "plan.json"
        self.plan.write_text(json.dumps(plans))
        self.profile = tmp / "p.toml"
        self.profile.write_text(
            f'name = "faults"\n[[matrix]]\nframeworks = ["command"]\n'
            f"models = {json.dumps(list(plans))}\nbatch_sizes = [8]\ndevices = [\"cpu:1\"]\n"
            f"warmup = 1\niterations = 3\ntimeout_s = {timeout_s}\nretries = 0\n"
            f"command = {json.dumps([sys.executable, '-c', 'pass'])}\n")
        self.env = {**os.environ, "DLTOP_DB": str(self.db), "DLTOP_PYTHON_COMMAND": str(fake),
                    "FAULT_PLAN": str(self.plan)}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dltop", *args]

    def dltop(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env,
                              timeout=timeout)

    def run(self, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return self.dltop("run", str(self.profile), "--headless", "--no-telemetry", *extra,
                          timeout=timeout)

    def start(self, *extra: str, prefix: Sequence[str] = ()) -> subprocess.Popen[str]:
        return subprocess.Popen([*prefix, *self.argv("run", str(self.profile), "--headless",
                                                     "--no-telemetry", *extra)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)

    def rows(self, sql: str, db: Path | None = None) -> list[dict[str, Any]]:
        return query(db or self.db, sql)

    def value(self, sql: str) -> Any:
        """The first column of the first row, or None (no database or table yet: polling)."""
        try:
            rows = self.rows(sql) if self.db.exists() else []
        except sqlite3.OperationalError:
            return None
        return next(iter(rows[0].values())) if rows else None

    def runs(self) -> list[dict[str, Any]]:
        return self.rows("select r.*, j.model from runs r join jobs j on j.id = r.job_id "
                         "order by r.id")

    def stored_iterations(self, run_id: int, measured: bool = True) -> int:
        return self.rows(f"select count(*) as n from iterations where run_id = {run_id}"
                         f"{' and warmup = 0' if measured else ''}")[0]["n"]


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in res.stderr + res.stdout, res.stderr


# fault 2: out-of-range values in events ----------------------------------------------------
BAD_ITERATIONS = {
    "samples 10**20": it(1, samples=10**20),
    "index 2**70": it(2**70),
    "negative seconds": it(1, -6.24),
    "NaN seconds": it(1, float("nan")),
    "seconds 1e308": it(1, 1e308),
    "zero seconds": it(1, 0),
    "seconds as text": it(1, "0.1"),
    "loss 10**400": it(1, loss=10**400),
    "boolean index": it(True),
    "t_mono_ns 2**64": ev("iter", index=1, seconds=0.1, samples=8, warmup=False, loss=1.0,
                          t_mono_ns=2**64),
}


def test_out_of_range_event_values_are_protocol_errors_and_the_queue_goes_on(
        tmp_path: Path) -> None:
    bad = good_run()
    bad[3:3] = list(BAD_ITERATIONS.values())  # after the warm-up and the first measured step
    bad.insert(1, ev("hello", framework="command", threads=10**20))  # a second, broken hello
    c = Campaign(tmp_path, {"bad": bad, "good": good_run()})
    res = c.run()
    no_traceback(res)
    assert res.returncode == 0, res.stderr  # before: OverflowError in the writer thread
    assert c.rows("select status from campaigns") == [{"status": "finished"}]
    first, second = c.runs()
    assert (first["status"], second["status"]) == ("ok", "ok")
    assert first["protocol_errors"] == len(BAD_ITERATIONS) + 1
    assert "threads" in first["note"] and "protocol error" in first["note"]
    assert second["protocol_errors"] == 0 and second["note"] is None
    for r in (first, second):
        assert r["n_iterations"] == 3 == c.stored_iterations(r["id"])
        assert 0.01 < r["mean_s"] < 0.02  # before: mean -6.24 s stored as ok
    assert c.rows("select threads from environment where run_id = 1") == [{"threads": 1}]


def test_duplicate_iteration_indexes_are_rejected_so_counts_match_rows(tmp_path: Path) -> None:
    plan = good_run(5)
    plan[5:5] = [it(2, 0.5), it(1, 0.5)]  # after index 2: 2 again, then one going back
    c = Campaign(tmp_path, {"dup": plan})
    res = c.run()
    assert res.returncode == 0, res.stderr
    (r,) = c.runs()
    assert r["protocol_errors"] == 2 and "index 2" in r["note"]
    assert r["n_iterations"] == 4 == c.stored_iterations(1)  # before: 6 counted, 4 stored
    assert r["mean_s"] < 0.1  # the rejected 0.5 s steps are not in the statistics


def test_a_batch_the_database_refuses_loses_only_its_rows(tmp_path: Path) -> None:
    # A real SQLite error on one iteration row (a trigger stands in for any failing write).
    c = Campaign(tmp_path, {"a": good_run(40, sleep_s=0.02), "b": good_run()})
    from dltop.store import connect

    connect(c.db).conn.execute(
        "create trigger refuse before insert on iterations when new.run_id = 1 and "
        "new.idx = 20 begin select raise(abort, 'injected refusal'); end")
    res = c.run()
    no_traceback(res)
    assert res.returncode == 0, res.stderr  # before: IntegrityError ended the engine
    first, second = c.runs()
    assert first["status"] == "ok" and second["status"] == "ok"
    stored = c.stored_iterations(1, measured=False)
    assert 0 < stored < 40  # the failing batch is lost, the others are kept
    assert f"{40 - stored} iteration rows not stored" in first["note"]
    assert "injected refusal" in first["note"]
    assert first["n_iterations"] == 39  # the summary still covers every measured step
    assert c.stored_iterations(2) == 3


def test_telemetry_batches_and_a_profile_that_are_lost_are_said_in_the_run_s_note(
        tmp_path: Path) -> None:
    # Issue 28: the engine counted lost telemetry batches and showed the count nowhere.
    # Issue 30: job b's profile names a kernel over MAX_OP_NAME: refused, and said so.
    huge_op = {"name": "k" * 20000, "calls": 1, "self_cpu_ms": 1.0, "self_device_ms": None,
               "total_ms": 1.0, "shapes": None}
    profiled = good_run()
    profiled.insert(-1, ev("profile", steps=5, step_ms=2.0, device="cpu", ops=[huge_op]))
    c = Campaign(tmp_path, {"a": good_run(60, sleep_s=0.04), "b": profiled})
    from dltop.store import connect

    conn = connect(c.db).conn
    for table in ("gpu_samples", "host_samples"):
        conn.execute(f"create trigger refuse_{table} before insert on {table} when "
                     "new.run_id = 1 begin select raise(abort, 'injected refusal'); end")
    res = c.dltop("run", str(c.profile), "--headless", "--fake-gpus", "1")
    no_traceback(res)
    assert res.returncode == 0, res.stderr
    first, second = c.runs()
    assert first["status"] == second["status"] == "ok"
    assert first["n_iterations"] == 59  # the run itself is whole
    note = first["note"] or ""
    assert note.startswith("telemetry: ") and "sample windows not stored" in note, note
    assert "injected refusal" in note
    assert "telemetry batch(es) could not be stored" in res.stderr, res.stderr
    assert second["note"].startswith(  # the run itself is ok, its profile lost and said
        "protocol error (1), first: operator profile not stored: profile event: ops.0.name")
    export = c.dltop("export", "--table", "profile", "--run", "2")
    assert export.returncode == 2 and "could not be stored; its note says: operator " \
        "profile not stored: profile event: ops.0.name" in export.stderr, export.stderr


# fault 7: storage errors -----------------------------------------------------------------
def test_a_lock_held_past_the_busy_timeout_is_waited_out(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    c = Campaign(tmp_path, {"long": good_run(203, sleep_s=0.03), "next": good_run()})
    c.env[BUSY_TIMEOUT_ENV] = "3"  # the engine's 30 s busy timeout, shortened for the test
    engine = c.start()
    wait_until(lambda: c.value("select count(*) from iterations"), 120,
               "the first iterations stored")
    holder = sqlite3.connect(c.db, isolation_level=None)
    holder.execute("begin immediate")  # another process's write lock, held past it
    time.sleep(8)
    holder.execute("rollback")
    holder.close()
    _out, err = engine.communicate(timeout=180)
    assert "Traceback" not in err and engine.returncode == 0, err
    first, second = c.runs()  # before: 'database is locked', the run and its rows lost
    assert first["status"] == second["status"] == "ok"
    assert first["n_iterations"] == 202 == c.stored_iterations(1)
    assert first["note"] is None
    assert c.rows("select status from campaigns") == [{"status": "finished"}]


FULL_AFTER_PAGES = """
import sys
from dltop.store import db as storedb
real = storedb.connect
def connect(*a, **k):
    d = real(*a, **k)
    pages = d.conn.execute("pragma page_count").fetchone()[0]
    # SQLITE_FULL soon after: room for the campaign, its jobs and their configurations
    d.conn.execute(f"pragma max_page_count = {pages + 10}")
    return d
storedb.connect = connect
import dltop.store
dltop.store.connect = connect
from dltop.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_batch_the_disk_cannot_hold_loses_its_rows_only(tmp_path: Path) -> None:
    # SQLITE_FULL for real (max_page_count on the engine's connection): one big batch.
    c = Campaign(tmp_path, {"a": good_run(2000), "b": good_run(), "c": good_run()})
    res = subprocess.run([sys.executable, "-c", FULL_AFTER_PAGES, "run", str(c.profile),
                          "--headless", "--no-telemetry"], capture_output=True, text=True,
                         env=c.env, timeout=180)
    no_traceback(res)
    assert res.returncode == 0, res.stderr  # before: OperationalError, campaign stranded
    first, *rest = c.runs()
    assert first["status"] == "ok" and first["n_iterations"] == 1999  # summary kept
    assert first["note"].startswith("storage: 2000 iteration rows not stored (")
    assert "database or disk is full" in first["note"]
    assert [r["status"] for r in rest] == ["ok", "ok"]
    assert c.rows("select status from campaigns") == [{"status": "finished"}]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root; "
                    "test_a_batch_the_disk_cannot_hold_loses_its_rows_only runs everywhere")
def test_a_full_disk_stops_the_campaign_with_one_line_and_resume_finishes_it(
        tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        c = Campaign(tmp_path, {"a": good_run(600, sleep_s=0.01), "b": good_run(),
                                "c": good_run()}, db=disk / "d.db")
        from dltop.store import connect

        connect(c.db).conn.close()
        filler = disk / "filler"
        with open(filler, "wb") as fh:  # leave 128 KiB for the campaign
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            fh.write(b"\0" * max(0, free - 128 * 1024))
        res = c.run()
        no_traceback(res)
        assert res.returncode == 1, res.stdout + res.stderr
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("dltop: error:")]
        assert len(errors) == 1, res.stderr
        assert "database or disk is full" in errors[0] and "--resume" in errors[0]
        filler.unlink()  # space again: the campaign is taken up where it stopped
        res = c.dltop("run", "--resume", "--headless", "--no-telemetry")
        assert res.returncode == 0, res.stderr
        assert c.rows("select status from campaigns") == [{"status": "finished"}]
        ok = [r["model"] for r in c.runs() if r["status"] == "ok"]
        assert sorted(set(ok)) == ["a", "b", "c"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_runs_directory_that_cannot_be_written_is_refused_at_preflight(
        tmp_path: Path) -> None:
    c = Campaign(tmp_path, {"a": good_run()})
    runs = tmp_path / "d-runs"
    runs.mkdir()
    if os.geteuid() == 0:  # root writes through any mode bits: a read-only file system
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k,mode=0700", "tmpfs",
                        str(runs)], check=True)
    else:
        runs.chmod(0o555)
    try:
        res = c.run()
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(runs)], check=True)
        runs.chmod(0o755)
    no_traceback(res)
    assert res.returncode == 2, res.stderr  # before: PermissionError mid-campaign
    assert res.stderr.startswith(f"dltop: error: {runs}: ") and "writ" in res.stderr
    assert not c.db.exists()  # refused before anything was written


def _corrupt(c: Campaign, *tables: str) -> None:
    """Overwrite the header of each table's root page (as a bad disk block would)."""
    conn = sqlite3.connect(c.db)
    conn.execute("pragma wal_checkpoint(truncate)")
    page_size = conn.execute("pragma page_size").fetchone()[0]
    roots = [conn.execute("select rootpage from sqlite_master where name = ?",
                          [t]).fetchone()[0] for t in tables]
    conn.close()
    with open(c.db, "r+b") as fh:
        for root in roots:
            fh.seek((root - 1) * page_size)
            fh.write(b"\x0d\xff\xff\xff" + b"\xee" * 60)


def test_a_malformed_page_gives_one_line_not_a_traceback(tmp_path: Path) -> None:
    c = Campaign(tmp_path, {"a": good_run()})
    assert c.run().returncode == 0
    _corrupt(c, "runs", "campaigns")
    for args in (["export"], ["runs"], ["status"], ["cancel"]):
        res = c.dltop(*args)
        no_traceback(res)
        assert res.returncode != 0, args
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dltop: error:"), (args, res.stderr)
        assert str(c.db) in lines[0] and "malformed" in lines[0]


# fault 9: WAL with a viewer open ---------------------------------------------------------
def test_a_campaign_is_in_the_db_file_itself_while_a_viewer_stays_open(tmp_path: Path) -> None:
    c = Campaign(tmp_path, {"a": good_run(), "b": good_run()})
    from dltop.store import connect

    connect(c.db)  # the database exists, as when a TUI is opened before the run
    viewer = connect(c.db, create=False)
    assert viewer.execute("select count(*) from campaigns").fetchone()[0] == 0
    res = c.run()
    assert res.returncode == 0, res.stderr
    assert viewer.execute("select count(*) from runs").fetchone()[0] == 2  # still open
    alone = tmp_path / "copy.db"
    alone.write_bytes(c.db.read_bytes())  # the .db without its -wal
    assert c.rows("select status from campaigns", alone) == [{"status": "finished"}]
    assert [r["status"] for r in c.rows("select status from runs", alone)] == ["ok", "ok"]
    assert c.rows("select count(*) as n from iterations", alone) == [{"n": 8}]
    viewer.conn.close()


# 11: schema guard, Ctrl-Z, protocol errors -------------------------------------------------
@pytest.mark.parametrize("claim", ["insert into schema_migrations (version, name, applied_at) "
                                   "values (99, 'future', '2030')", "pragma user_version = 99"])
def test_a_database_from_a_newer_dltop_is_refused_for_writing_and_reading(
        tmp_path: Path, claim: str) -> None:
    c = Campaign(tmp_path, {"a": good_run()})
    assert c.run().returncode == 0
    conn = sqlite3.connect(c.db, isolation_level=None)
    conn.execute(claim)
    conn.close()
    before = c.db.read_bytes()
    for args in (["run", str(c.profile), "--headless"], ["export"], ["runs"], ["status"],
                 ["cancel"]):
        res = c.dltop(*args)
        no_traceback(res)
        assert res.returncode == 2, (args, res.stderr)
        assert "newer dltop" in res.stderr and "99" in res.stderr, res.stderr
    assert c.db.read_bytes() == before


def test_a_renamed_column_gives_clear_errors_and_stops_the_engine_loudly(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    c = Campaign(tmp_path, {"a": good_run(400, sleep_s=0.02), "b": good_run()})
    engine = c.start()
    wait_until(lambda: c.value("select count(*) from runs"), 120, "the first run")
    conn = sqlite3.connect(c.db, isolation_level=None)
    conn.execute("alter table campaigns rename column control to control_renamed")
    conn.close()
    _out, err = engine.communicate(timeout=180)
    assert "Traceback" not in err
    # before: the control watcher died silently and the campaign ran on, unsteerable
    assert engine.returncode == 1 and "no such column: control" in err, err
    (camp,) = c.rows("select status, error_message from campaigns")
    assert camp["status"] == "failed" and "control" in camp["error_message"]
    (first,) = c.runs()  # the run in progress was stopped; its job waits for --resume
    assert first["status"] == "cancelled"
    assert first["error_message"].startswith("stopped with the campaign: ")
    assert [j["status"] for j in c.rows("select status from jobs order by id")] == \
        ["queued", "queued"]
    shown = c.dltop("status")
    assert "failed" in shown.stdout and "stopped by: " in shown.stdout, shown.stdout
    assert "no such column: control" in shown.stdout
    for args in (["run", "--resume", "--headless"], ["run", str(c.profile), "--headless"]):
        res = c.dltop(*args)  # writers refuse the damaged schema up front
        no_traceback(res)
        assert res.returncode == 2 and "campaigns.control" in res.stderr, (args, res.stderr)
    # `dltop cancel` while an engine (this test process) owns the campaign
    from dltop.procs import process_start_time

    conn = sqlite3.connect(c.db, isolation_level=None)
    conn.execute("update campaigns set status = 'running', engine_pid = ?, "
                 "engine_start_time = ?", [os.getpid(), process_start_time(os.getpid())])
    conn.close()
    res = c.dltop("cancel")
    no_traceback(res)  # before: a traceback
    assert res.returncode == 2 and "campaigns.control" in res.stderr, res.stderr
    for args in (["status"], ["runs"], ["export"]):  # readers: a result or one line
        res = c.dltop(*args)
        no_traceback(res)
        assert res.returncode == 0 or len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_ctrl_z_of_the_engine_does_not_turn_a_finished_run_into_a_timeout(
        tmp_path: Path, wait_until: Callable[..., None]) -> None:
    c = Campaign(tmp_path, {"a": good_run(20, sleep_s=0.1), "b": good_run()}, timeout_s=6)
    engine = c.start()
    wait_until(lambda: c.value("select pid from runs where id = 1"), 120, "the child")
    engine.send_signal(signal.SIGSTOP)  # Ctrl-Z, left stopped past timeout_s
    time.sleep(9)
    engine.send_signal(signal.SIGCONT)
    _out, err = engine.communicate(timeout=180)
    assert engine.returncode == 0, err
    assert [r["status"] for r in c.runs()] == ["ok", "ok"]  # before: the first was 'timeout'


async def test_the_viewer_closes_its_connection_when_it_quits(tmp_path: Path) -> None:
    import asyncio

    from dltop.store import connect
    from dltop.tui.app import DltopApp

    c = Campaign(tmp_path, {"a": good_run()})
    assert c.run().returncode == 0
    app = DltopApp(c.db, tmp_path / "d-runs", None, db_hz=50, resume_orphans=False)
    async with app.run_test():
        for _ in range(500):
            if app.campaign_view is not None:
                break
            await asyncio.sleep(0.02)
        assert app.campaign_view is not None and app._db is not None
        reader = app._db.conn
    with pytest.raises(sqlite3.ProgrammingError):  # closed, not left to the GC
        reader.execute("select 1")
    writer = connect(c.db)  # nothing holds the database: the -wal is emptied at once
    assert writer.execute("pragma wal_checkpoint(truncate)").fetchone()[0] == 0


def test_a_missing_column_is_explained_as_an_older_or_a_changed_schema(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dltop.store import connect, migrations
    from dltop.store.db import explain_failure

    err = sqlite3.OperationalError("no such column: r.note")
    old = tmp_path / "old.db"
    with monkeypatch.context() as m:  # a database an older dltop (5 migrations) wrote
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:5])
        connect(old).close()
    line, code = explain_failure(old, err)
    assert code == 2 and "written by an older dltop (schema version 5" in line
    new = tmp_path / "new.db"
    connect(new).close()
    sqlite3.connect(new).execute("alter table runs rename column note to remark").connection \
        .close()
    line, code = explain_failure(new, err)
    assert code == 2 and "changed outside dltop (missing runs.note)" in line
    assert explain_failure(new, sqlite3.DatabaseError("database disk image is malformed")) == (
        f"{new}: database error: database disk image is malformed", 1)
