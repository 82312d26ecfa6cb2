"""One owner per campaign across hosts (issue 38, item 1), without Slurm.

Two login nodes are played on one machine by ``DLTOP_HOST`` (each with its own device
lock directory, as two hosts have). Engine A is frozen (SIGSTOP) past the heartbeat's
limit, host B's ``--resume`` takes the campaign over, A is woken (SIGCONT): A must
exit 3 naming B, write nothing after the takeover, and B finishes the campaign.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.jobs import campaign
from dltop.jobs.engine import Engine
from dltop.procs import HEARTBEAT_STALE_S, process_start_time
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.store.fence import EXIT_OWNERSHIP_LOST, OwnershipLost

pytestmark = pytest.mark.slow

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
"""The runs: a program of sleeping steps (the engines are under test, not a framework)."""


def job(model: str, iterations: int, step_s: float) -> dict[str, object]:
    return {"frameworks": ["command"], "models": [model], "batch_sizes": [8],
            "devices": ["cpu:1"], "iterations": iterations,
            "command": [sys.executable, str(STEPS), "{total}", str(step_s)]}


def rows(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def freeze_outside_a_write(proc: subprocess.Popen[str], db: Path) -> None:
    """SIGSTOP ``proc`` at a moment it holds no write lock (a frozen writer would hold
    every host's writes up: the takeover could not happen, in the test or for real)."""
    for _ in range(100):
        os.kill(proc.pid, signal.SIGSTOP)
        conn = sqlite3.connect(db, timeout=0.2, isolation_level=None)
        try:
            conn.execute("begin immediate")
            conn.execute("rollback")
            return
        except sqlite3.OperationalError:
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            conn.close()
    raise AssertionError("the engine always held the write lock")


def events(path: Path) -> list[dict[str, Any]]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_frozen_engine_taken_over_exits_3_and_writes_nothing_after(
        tmp_path: Path, wait_until: Any, profile_text: Any) -> None:
    db = tmp_path / "d.db"
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text(job("first", 300, 0.01), job("second", 30, 0.05),
                                 job("third", 30, 0.05), name="fenced",
                                 defaults={"warmup": 1, "timeout_s": 300}))
    base = {**os.environ, "DLTOP_DB": str(db)}
    (tmp_path / "locks-a").mkdir()
    (tmp_path / "locks-b").mkdir()
    a_out, a_err = tmp_path / "a.out", tmp_path / "a.err"
    with a_out.open("w") as out, a_err.open("w") as err:
        a = subprocess.Popen(
            [sys.executable, "-m", "dltop", "run", str(prof), "--json"], stdout=out,
            stderr=err, text=True,
            env={**base, "DLTOP_HOST": "login1", "DLTOP_LOCK_DIR": str(tmp_path / "locks-a")})
    b: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: any(e["event"] == "iteration" and e.get("index", 0) >= 5
                               for e in events(a_out)), 120, "A's first run to measure")
        (first_run,) = [e["run_id"] for e in events(a_out) if e["event"] == "run_started"]
        freeze_outside_a_write(a, db)
        (runner,) = rows(db, "select pid from runs where id = ?", (first_run,))[0]
        # A frozen for longer than the heartbeat's limit, as host B sees it
        conn = sqlite3.connect(db, timeout=30)
        conn.execute("update campaigns set engine_heartbeat_s = ?",
                     [time.time() - HEARTBEAT_STALE_S - 30])
        conn.commit()
        conn.close()
        b_err = tmp_path / "b.err"
        with b_err.open("w") as err:
            b = subprocess.Popen(
                [sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                stdout=subprocess.DEVNULL, stderr=err, text=True,
                env={**base, "DLTOP_HOST": "login2",
                     "DLTOP_LOCK_DIR": str(tmp_path / "locks-b")})
        # B took it over, marked A's run lost and is running its own
        wait_until(lambda: rows(db, "select count(*) from runs where id > ? and status = "
                                    "'running'", (first_run,)) == [(1,)], 120,
                   "B to run a job of the campaign")
        assert rows(db, "select owner_generation, engine_host, engine_pid from campaigns") \
            == [(2, "login2", b.pid)]
        before = {
            "a's run": rows(db, "select * from runs where id = ?", (first_run,)),
            "a's iterations": rows(db, "select count(*), max(idx) from iterations "
                                       "where run_id = ?", (first_run,)),
            "a's samples": rows(db, "select count(*) from host_samples where run_id = ?",
                                (first_run,)),
            "ended runs": rows(db, "select * from runs where status != 'running' "
                                   "order by id")}
        assert rows(db, "select status, error_kind from runs where id = ?", (first_run,)) \
            == [("crashed", "engine_lost")]  # B's reaping: A's run is lost, its job queued
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(timeout=60) == EXIT_OWNERSHIP_LOST
        stderr = a_err.read_text()
        assert f"taken over by the engine on host login2 (pid {b.pid})" in stderr, stderr
        assert "Traceback" not in stderr and stderr.count("dltop: error:") == 1, stderr
        after = {
            "a's run": rows(db, "select * from runs where id = ?", (first_run,)),
            "a's iterations": rows(db, "select count(*), max(idx) from iterations "
                                       "where run_id = ?", (first_run,)),
            "a's samples": rows(db, "select count(*) from host_samples where run_id = ?",
                                (first_run,))}
        for what, seen in after.items():
            assert seen == before[what], f"A wrote {what} after the takeover"
        assert not alive(runner), "A's runner outlived the takeover"

        assert b.wait(timeout=240) == 0, b_err.read_text()
        b = None
        # every run that had ended when A woke is as it was (none rewritten)
        ended = {r[0]: r for r in before["ended runs"]}
        now = {r[0]: r for r in rows(db, "select * from runs order by id")}
        assert all(now[k] == r for k, r in ended.items())
        # the campaign: A's interrupted run, then one run per job, all B's, one at a time
        runs = rows(db, "select j.position, r.status, r.error_kind from runs r "
                        "join jobs j on j.id = r.job_id order by r.id")
        assert runs == [(0, "crashed", "engine_lost"), (0, "ok", None), (1, "ok", None),
                        (2, "ok", None)]
        spans = rows(db, "select min(t_wall_s), max(t_wall_s) from iterations i join runs r "
                         "on r.id = i.run_id where r.status = 'ok' group by r.id order by "
                         "min(t_wall_s)")
        assert all(end < start for (_, end), (start, _) in itertools.pairwise(spans)), spans
        assert rows(db, "select status, engine_host, owner_generation from campaigns") == [
            ("finished", "login2", 2)]
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()


PROFILE = f"""
name = "fenced"
[[matrix]]
frameworks = ["command"]
models = ["steps"]
batch_sizes = [8]
devices = ["cpu:1"]
iterations = 100000
warmup = 1
timeout_s = 600
command = {json.dumps([sys.executable, str(STEPS), "{total}", "0.01"])}
"""
"""One long run of 10 ms steps: it goes on until its engine stops it."""


def test_an_engine_that_lost_its_campaign_stops_its_runner_and_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, without a resume's reaping (another host could not reach the runner):
    the engine's own heartbeat finds the takeover, and the engine kills its runner."""
    monkeypatch.setenv("DLTOP_HOST", "login1")
    db = tmp_path / "d.db"
    store = Store(connect(db))
    plan = campaign.preflight([parse(PROFILE, "p.toml", "p")], 0, False)
    cid = campaign.store_plan(store, plan, ["dltop", "run", "p.toml"])
    store.fence(cid)
    engine = Engine(store, cid, plan.name, logs_dir=tmp_path / "runs", db_label="t")

    async def take_over_once_measuring(task: asyncio.Task[str]) -> tuple[int, int]:
        deadline = time.monotonic() + 120
        while not rows(db, "select 1 from iterations where idx >= 5"):
            assert time.monotonic() < deadline and not task.done(), "the run never measured"
            await asyncio.sleep(0.05)
        b = Store(connect(db, create=False))
        assert b.queue.claim(cid, 4242, 1.0, (os.getpid(), process_start_time(os.getpid())),
                             "login2", 1)
        ((run_id, pid),) = rows(db, "select id, pid from runs")
        return run_id, pid

    async def go() -> tuple[int, int]:
        task = asyncio.create_task(engine.run())
        run_id, pid = await take_over_once_measuring(task)
        count = rows(db, "select count(*) from iterations")
        with pytest.raises(OwnershipLost, match="host login2 \\(pid 4242\\)"):
            await asyncio.wait_for(task, 30)
        assert rows(db, "select count(*) from iterations") == count
        return run_id, pid

    run_id, pid = asyncio.run(go())
    assert not alive(pid), "the runner outlived its engine's loss of the campaign"
    # the run and the campaign as the takeover left them: the new owner reaps the run
    assert rows(db, "select status from runs where id = ?", (run_id,)) == [("running",)]
    assert rows(db, "select status, owner_generation, engine_pid from campaigns") == [
        ("running", 2, 4242)]
