"""``dltop run``'s ends: what stopped it is stored and printed as what it was, its exit
status says it (128 + the signal; 4 for a ``short`` run), and a resumed engine's last
line gives the campaign's totals. Real engines, real runs (tests/programs/steps.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dltop.live.campaign import read_jobs
from dltop.store import connect

pytestmark = pytest.mark.slow

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
HUP = "stopped by SIGHUP (the terminal closed)"


def job(model: str, iterations: int, steps: str = "{total}") -> dict[str, object]:
    """One ``[[matrix]]`` table: the steps program (``steps`` of them) on one CPU."""
    return {"frameworks": ["command"], "models": [model], "batch_sizes": [8],
            "devices": ["cpu:1"], "iterations": iterations,
            "command": [sys.executable, str(STEPS), steps, "0.01"]}


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_sighup_is_not_the_user_and_a_short_run_before_resume_still_counts(
        tmp_path: Path, profile_text: Any) -> None:
    prof = tmp_path / "p.toml"
    # the first job's program ends after 2 of its 5 + 1 steps: `short`
    prof.write_text(profile_text(job("cut", 5, steps="2"), job("held", 30),
                                 name="hup", defaults={"warmup": 1, "timeout_s": 300}))
    db, go = tmp_path / "d.db", tmp_path / "go"
    env = {**os.environ, "DLTOP_DB": str(db), "STEPS_HOLD": str(go)}
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    deadline = time.monotonic() + 120
    while not Path(f"{go}.held").exists():  # the second run holds in its 13th step
        assert time.monotonic() < deadline and engine.poll() is None
        time.sleep(0.05)
    engine.send_signal(signal.SIGHUP)  # what a closed SSH session sends
    out, err = engine.communicate(timeout=60)
    assert engine.returncode == 128 + signal.SIGHUP, err
    # the stopped run's line: its median is marked, the short run's is its figure
    lines = out.splitlines()
    assert any("  cancelled  partial median " in line and HUP in line for line in lines), out
    assert any("  short  0.01" in line for line in lines), out
    assert f"campaign 1 {HUP}; finished runs are stored in" in err, err
    assert query(db, "select status, error_message from runs order by id") == [
        ("short", "short: 1 of 5 measured iterations (the program ended before dltop had "
                  "them all)"),
        ("cancelled", HUP)]
    assert query(db, "select status, error_message from campaigns") == [("cancelled", HUP)]
    status = subprocess.run([sys.executable, "-m", "dltop", "status"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert f"  {HUP}; 'dltop run --resume' runs its cancelled jobs" in status.stdout, \
        status.stdout
    # the stopped run's median (of its 12 steps) is no result: the queue shows none,
    # `dltop runs` marks it, beside the short run's own
    (partial,) = query(db, "select median_s from runs where status = 'cancelled'")[0]
    assert partial is not None
    queue = read_jobs(connect(db), 1, 0, 10)
    assert [(j.status, j.median_s is not None) for j in queue] == [
        ("short", True), ("cancelled", False)]
    runs = subprocess.run([sys.executable, "-m", "dltop", "runs"], capture_output=True,
                          text=True, env=env, timeout=60)
    # by run id (1 short, 2 cancelled): columns the same on every row go to the caption
    lines = {line.split()[0]: line for line in runs.stdout.splitlines()[1:] if line.strip()}
    assert " cancelled " in lines["2"] and " short " in lines["1"], runs.stdout
    assert " partial " in lines["2"] and "partial" not in lines["1"], runs.stdout

    go.touch()
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                         capture_output=True, text=True, env=env, timeout=300)
    # the short run was the first engine's: the campaign's exit says it all the same
    assert res.returncode == 4, res.stderr + res.stdout
    assert "a run ended short" in res.stderr, res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last == "campaign 1 finished: 1 ok, 1 short (this engine: 1 ok)", res.stdout
    assert query(db, "select status, error_message from campaigns") == [("finished", None)]
