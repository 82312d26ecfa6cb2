"""The engine SIGKILLed mid-campaign, then ``dltop run --resume``: nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = pytest.mark.slow


STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
"""The runs: a program of 10 ms steps (the engine is under test, not a framework)."""


def job(model: str, iterations: int) -> dict[str, object]:
    """One ``[[matrix]]`` table: :data:`STEPS` as ``model`` on one CPU at batch 8."""
    return {"frameworks": ["command"], "models": [model], "batch_sizes": [8],
            "devices": ["cpu:1"], "iterations": iterations,
            "command": [sys.executable, str(STEPS), "{total}", "0.01"]}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_engine_killed_then_resumed(tmp_path: Path, wait_until: Any, profile_text: Any) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text(job("first", 3), job("second", 500),
                                 name="resume-me",
                                 defaults={"warmup": 1, "timeout_s": 300}))
    go = tmp_path / "go"  # the second run holds in its 13th step until this exists
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db"), "STEPS_HOLD": str(go)}
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=env)
    assert engine.stdout is not None
    deadline = time.monotonic() + 120
    second_run = None
    for line in engine.stdout:
        event = json.loads(line)
        if event["event"] == "run_started" and event["position"] == 1:
            second_run = event["run_id"]
        if second_run and event["event"] == "iteration" and event["index"] > 5:
            break
        assert time.monotonic() < deadline
    # Killed between two events: a runner ends at its next event once its engine is gone.
    wait_until(lambda: Path(f"{go}.held").exists(), 60, "the second run to hold")
    engine.kill()
    engine.wait()
    conn = sqlite3.connect(tmp_path / "d.db")
    (pid,) = conn.execute("select pid from runs where id = ?", [second_run]).fetchone()
    conn.close()
    assert alive(pid), "the runner outlives its engine (own session) while it holds"
    env.pop("STEPS_HOLD")  # the resumed run does not hold; the orphan holds till reaped

    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "1 interrupted run re-queued" in res.stderr
    # the last line gives the campaign's jobs, the first engine's run included
    assert res.stdout.strip().splitlines()[-1] == \
        "campaign 1 finished: 2 ok (this engine: 1 ok)", res.stdout
    assert re.search(r"\d+ orphaned process(es)? killed", res.stderr)
    wait_until(lambda: not alive(pid), 10, f"the orphaned runner {pid} to die")

    conn = sqlite3.connect(tmp_path / "d.db")
    runs = conn.execute("select job_id, attempt, status, error_kind from runs order by id"
                        ).fetchall()
    camp = conn.execute("select status from campaigns").fetchall()
    conn.close()
    assert runs == [(1, 1, "ok", None), (2, 1, "crashed", "engine_lost"), (2, 2, "ok", None)]
    assert camp == [("finished",)]

    again = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume"],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "no unfinished campaign" in again.stderr


def test_a_sigtermed_campaign_is_resumed_with_its_cancelled_jobs(
        tmp_path: Path, profile_text: Any) -> None:
    # SIGTERM (a reboot's) cancels the campaign; `--resume` queues its cancelled jobs
    # again (it used to say only "run the profile again": every job anew)
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text(job("first", 30), job("second", 3), job("third", 3),
                                 name="stopped", defaults={"warmup": 1, "timeout_s": 300}))
    go = tmp_path / "go"
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db"), "STEPS_HOLD": str(go)}
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=env)
    deadline = time.monotonic() + 120
    while not Path(f"{go}.held").exists():  # the first run holds in its 13th step
        assert time.monotonic() < deadline and engine.poll() is None
        time.sleep(0.05)
    engine.terminate()
    _, err = engine.communicate(timeout=60)
    assert "Traceback" not in err, err
    # not "cancelled by the user": a reboot or `kill` is not; the shell's 128 + 15
    assert engine.returncode == 143, err
    term = "stopped by SIGTERM (a shutdown, a batch system or kill)"
    assert f"campaign 1 {term}; finished runs are stored in" in err, err
    assert "'dltop run --resume' runs the jobs left" in err
    conn = sqlite3.connect(tmp_path / "d.db")
    assert conn.execute("select status, error_message from campaigns").fetchall() == [
        ("cancelled", term)]
    assert conn.execute("select error_message from runs").fetchall() == [(term,)]
    assert conn.execute("select status from jobs order by position").fetchall() == [
        ("cancelled",)] * 3
    conn.close()
    go.touch()
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "it was cancelled: 3 cancelled jobs queued again" in res.stderr, res.stderr
    conn = sqlite3.connect(tmp_path / "d.db")
    runs = conn.execute("select job_id, attempt, status from runs order by id").fetchall()
    camp = conn.execute("select status from campaigns").fetchall()
    conn.close()
    assert runs == [(1, 1, "cancelled"), (1, 2, "ok"), (2, 1, "ok"), (3, 1, "ok")]
    assert camp == [("finished",)]
    # a finished campaign, an older cancelled one named: nothing more to resume
    again = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume"],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "is finished" in again.stderr, again.stderr
