"""One owner per Slurm campaign across hosts (issue 38, item 1), on the real cluster.

Engine A on login node ``login1`` runs a campaign of command jobs in Slurm and is frozen
(SIGSTOP) while its batch job runs, past the heartbeat's limit; ``--resume`` on
``login2`` takes the campaign over and cancels A's batch job (as a resume after a dead
engine does), then runs the campaign itself. A is woken (SIGCONT): it must exit 3
naming login2, write nothing after the takeover, and B finishes the campaign. The same
case without Slurm is tests/core/test_fence_takeover.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dltop.procs import HEARTBEAT_STALE_S
from dltop.store.fence import EXIT_OWNERSHIP_LOST

from .cluster import LocalSlurm
from .test_slurm_runs import env_for, runs, slurm_state, wait_for_run

pytestmark = pytest.mark.slow

PROGRAM = ("import sys, time\nfor i in range(int(sys.argv[1])):\n"
           "    time.sleep(float(sys.argv[2]))\n"
           "    print('step %d took %ss' % (i, sys.argv[2]), flush=True)\n")
PROFILE = """
name = "fenced"
[defaults]
warmup = 1
timeout_s = 120
executor = "slurm"
iteration_regex = 'took (?P<seconds>[0-9.]+)s'
command = [{python}, "-c", {program}, "{{total}}", "0.05"]
[[matrix]]
frameworks = ["command"]
models = ["long"]
batch_sizes = [8]
devices = ["cpu:1"]
iterations = 100
[[matrix]]
frameworks = ["command"]
models = ["short"]
batch_sizes = [8]
devices = ["cpu:1"]
iterations = 4
"""
"""Two jobs: the first (about 5 s of steps) is the one A is frozen in; B runs both."""


def rows(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def freeze_outside_a_write(proc: subprocess.Popen[str], db: Path) -> None:
    """SIGSTOP ``proc`` when it holds no write lock (a frozen writer would block every
    host's writes, the takeover's too)."""
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


def test_a_frozen_slurm_engine_taken_over_exits_3_and_writes_nothing_after(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(python=json.dumps(sys.executable),
                                   program=json.dumps(PROGRAM)))
    env = env_for(tmp_path)
    (tmp_path / "locks-a").mkdir()
    (tmp_path / "locks-b").mkdir()
    a_err = tmp_path / "a.err"
    with a_err.open("w") as err:
        a = subprocess.Popen(
            [sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
            stdout=subprocess.DEVNULL, stderr=err, text=True,
            env={**env, "DLTOP_HOST": "login1", "DLTOP_LOCK_DIR": str(tmp_path / "locks-a")})
    b: subprocess.Popen[str] | None = None
    try:
        first = wait_for_run(tmp_path, a, "measuring in Slurm",
                             lambda r: r["slurm_state"] == "RUNNING" and rows(
                                 db, "select count(*) from iterations where run_id = ? "
                                     "and not warmup", (r["id"],))[0][0] >= 3)
        freeze_outside_a_write(a, db)
        job = first["slurm_job_id"]
        assert slurm_state(slurm_env, job) == "RUNNING"  # A's batch job goes on, A frozen
        conn = sqlite3.connect(db, timeout=30)  # A frozen past the limit, as login2 sees it
        conn.execute("update campaigns set engine_heartbeat_s = ?",
                     [time.time() - HEARTBEAT_STALE_S - 30])
        conn.commit()
        conn.close()
        b_err = tmp_path / "b.err"
        with b_err.open("w") as err:
            b = subprocess.Popen(
                [sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                stdout=subprocess.DEVNULL, stderr=err, text=True,
                env={**env, "DLTOP_HOST": "login2",
                     "DLTOP_LOCK_DIR": str(tmp_path / "locks-b")})
        # B took it over: A's run lost, its batch job cancelled, B's own job in Slurm
        second = wait_for_run(tmp_path, b, "of B's in Slurm",
                              lambda r: r["id"] > first["id"] and r["slurm_job_id"])
        assert second["slurm_job_id"] != job
        assert rows(db, "select owner_generation, engine_host, engine_pid from campaigns") \
            == [(2, "login2", b.pid)]
        deadline = time.monotonic() + 60
        while slurm_state(slurm_env, job) != "CANCELLED" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert slurm_state(slurm_env, job) == "CANCELLED"
        before = {
            "a's run": rows(db, "select * from runs where id = ?", (first["id"],)),
            "a's iterations": rows(db, "select count(*), max(idx) from iterations "
                                       "where run_id = ?", (first["id"],)),
            "a's samples": rows(db, "select count(*) from host_samples where run_id = ?",
                                (first["id"],))}
        assert rows(db, "select status, error_kind from runs where id = ?",
                    (first["id"],)) == [("crashed", "engine_lost")]
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(timeout=60) == EXIT_OWNERSHIP_LOST
        stderr = a_err.read_text()
        assert f"taken over by the engine on host login2 (pid {b.pid})" in stderr, stderr
        assert "Traceback" not in stderr and stderr.count("dltop: error:") == 1, stderr
        after = {
            "a's run": rows(db, "select * from runs where id = ?", (first["id"],)),
            "a's iterations": rows(db, "select count(*), max(idx) from iterations "
                                       "where run_id = ?", (first["id"],)),
            "a's samples": rows(db, "select count(*) from host_samples where run_id = ?",
                                (first["id"],))}
        for what, seen in after.items():
            assert seen == before[what], f"A wrote {what} after the takeover"

        assert b.wait(timeout=180) == 0, (tmp_path / "b.err").read_text()
        b = None
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
    done = runs(tmp_path)
    assert [(r["status"], r["error_kind"]) for r in done] == [
        ("crashed", "engine_lost"), ("ok", None), ("ok", None)], done
    assert [r["slurm_state"] for r in done[1:]] == ["COMPLETED", "COMPLETED"]
    assert rows(db, "select status, engine_host, owner_generation from campaigns") == [
        ("finished", "login2", 2)]
