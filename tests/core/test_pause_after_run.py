"""A pause takes effect after the runs going on: the campaign is `paused` only once they
ended (a viewer shows "pausing after run N" until then), and a one-run cancel (the TUI's
`c`) ends exactly the run it names."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dltop.store import Store, connect

pytestmark = pytest.mark.slow

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
PROFILE = f"""
name = "pause"
[[matrix]]
frameworks = ["command"]
models = ["steps"]
batch_sizes = [8]
devices = ["cpu:1"]
repeats = 2
iterations = 1000000
warmup = 1
timeout_s = 600
command = {json.dumps([sys.executable, str(STEPS), "{total}", "0.02"])}
"""
"""Runs of a program of 20 ms steps (the engine's pause is under test, not a framework)."""


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_paused_only_after_the_run_ends(tmp_path: Path, wait_until: Any) -> None:
    db = tmp_path / "d.db"
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE)
    env = {**os.environ, "DLTOP_DB": str(db)}
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the first run is measuring
            e = json.loads(line)
            if e["event"] == "iteration" and e.get("index", 0) >= 3:
                break
        res = subprocess.run([sys.executable, "-m", "dltop", "pause"], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        # The engine reads the request within 0.5 s; watch well past that.
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            assert query(db, "select status, control from campaigns") == [("running", "pause")]
            assert query(db, "select status from runs") == [("running",)]
            time.sleep(0.1)
        (run_id,) = query(db, "select id from runs")[0]
        assert Store(connect(db)).edits.cancel_run(1, run_id).changed == 1
        wait_until(lambda: query(db, "select status from campaigns") == [("paused",)], 120,
                   "the campaign to be paused once its run ended", interval_s=0.1)
        assert query(db, "select status from runs") == [("cancelled",)]  # none started since
        assert query(db, "select status from jobs order by id") == [("cancelled",), ("queued",)]
        res = subprocess.run([sys.executable, "-m", "dltop", "cancel"], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


HOLD = """
import sys, time
from pathlib import Path
from dltop.jobs.lease import DeviceLease
held = DeviceLease(sys.argv[2:], {"campaign": 7, "name": "other", "db": "x.db"}, Path(sys.argv[1]))
assert held.poll() is None and not held.unavailable
print("held", flush=True)
time.sleep(300)
"""

SLEEPER = """
import sys
from dltop_report import step
for i in range(int(sys.argv[1])):
    with step(samples=8):
        pass
"""


def test_a_pause_while_waiting_for_devices_starts_no_run(tmp_path: Path, wait_until: Any,
                                                         profile_text: Any) -> None:
    db, locks = tmp_path / "d.db", tmp_path / "locks"
    env = {**os.environ, "DLTOP_DB": str(db), "DLTOP_LOCK_DIR": str(locks)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(locks),
                               *(f"cpu-{i}" for i in range(os.cpu_count() or 1))],
                              stdout=subprocess.PIPE, text=True, env=env)
    engine = None
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        script = tmp_path / "sleeper.py"
        script.write_text(SLEEPER)
        prof = tmp_path / "p.toml"
        prof.write_text(profile_text({
            "frameworks": ["command"], "models": ["sleeper"], "batch_sizes": [8],
            "devices": ["cpu:1"], "warmup": 1, "iterations": 5, "timeout_s": 120,
            "command": [sys.executable, str(script), "{total}"]}, name="waits"))
        engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof),
                                   "--headless", "--no-telemetry"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        def status() -> list[tuple[Any, ...]] | None:
            try:
                return query(db, "select status from campaigns")
            except sqlite3.OperationalError:  # the engine is still creating the database
                return None

        wait_until(lambda: status() == [("waiting",)], 120,
                   "the campaign to wait for its devices")
        res = subprocess.run([sys.executable, "-m", "dltop", "pause"], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        wait_until(lambda: query(db, "select control from campaigns") == [("pause",)], 30,
                   "the pause request")
        time.sleep(1.0)  # the engine has read it (0.5 s polls)
        holder.kill()  # the devices are free: the job must not start, the campaign pauses
        wait_until(lambda: query(db, "select status from campaigns") == [("paused",)], 60,
                   "the campaign to be paused", interval_s=0.1)
        assert query(db, "select count(*) from runs") == [(0,)]
        assert query(db, "select status from jobs") == [("queued",)]
        res = subprocess.run([sys.executable, "-m", "dltop", "resume"], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        assert engine.wait(timeout=120) == 0, engine.communicate()[1]
        assert query(db, "select status from runs") == [("ok",)]
    finally:
        for proc in (holder, engine):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
