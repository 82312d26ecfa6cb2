"""Steering a live campaign from another process, retries, and a concurrent reader."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

PROFILE = """
name = "steer"
[[matrix]]
frameworks = ["{framework}"]
models = {models}
batch_sizes = [2]  # the engine is under test, not the model: small steps
devices = ["cpu:1"]
iterations = {iterations}
warmup = 1
timeout_s = 300
{extra}
"""

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
"""The steering tests' runs: a program of 30 ms steps. The engine is under test, not a
framework: a PyTorch runner spent ~5 s of CPU starting, per run."""


def command_toml(step_s: float = 0.03) -> str:
    """The ``command`` line of a job running :data:`STEPS` with ``step_s``-second steps."""
    return "command = " + json.dumps([sys.executable, str(STEPS), "{total}", str(step_s), "2"])


def start(tmp_path: Path, iterations: int = 40, models: str = '["a", "b", "c"]',
          extra: str = "") -> subprocess.Popen[str]:
    """The engine on ``command`` jobs (:data:`STEPS`, one per model) of ``iterations``
    steps, then the ``extra`` TOML."""
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(framework="command", iterations=iterations, models=models,
                                   extra=command_toml() + "\n" + extra))
    return subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")})


def dltop(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")})


def query(tmp_path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(tmp_path / "d.db", timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def wait_for(proc: subprocess.Popen[str], event: str, **match: object) -> dict[str, object]:
    assert proc.stdout is not None
    for line in proc.stdout:
        e = json.loads(line)
        if e["event"] == event and all(e.get(k) == v for k, v in match.items()):
            return dict(e)
    raise AssertionError(f"no {event} {match}")


def test_pause_then_resume(tmp_path: Path, wait_until: Any) -> None:
    proc = start(tmp_path, iterations=40)
    wait_for(proc, "run_started", position=0)
    res = dltop(tmp_path, "pause")
    assert res.returncode == 0, res.stderr
    wait_for(proc, "run_finished")
    wait_until(lambda: query(tmp_path, "select status from campaigns") == [("paused",)], 60,
               "the campaign to report paused")
    paused_at = query(tmp_path, "select count(*) from runs")
    # An absence has no event to wait for: watch a while that no run starts while paused.
    time.sleep(1.5)
    assert query(tmp_path, "select count(*) from runs") == paused_at  # nothing started
    assert query(tmp_path, "select count(*) from runs where status = 'running'") == [(0,)]
    assert dltop(tmp_path, "resume").returncode == 0
    assert proc.wait(timeout=240) == 0
    assert query(tmp_path, "select status from runs") == [("ok",)] * 3
    assert query(tmp_path, "select status from campaigns") == [("finished",)]
    res = dltop(tmp_path, "pause")
    assert res.returncode == 2 and "nothing unfinished" in res.stderr


def test_cancel_from_another_process(tmp_path: Path) -> None:
    proc = start(tmp_path, iterations=100000)
    wait_for(proc, "iteration", index=2)
    assert dltop(tmp_path, "cancel").returncode == 0
    assert proc.wait(timeout=60) == 130
    user = "cancelled by the user ('dltop cancel' or the viewer)"
    assert query(tmp_path, "select status, error_message from runs") == [("cancelled", user)]
    assert query(tmp_path, "select error_message from campaigns") == [(user,)]
    assert query(tmp_path, "select status from jobs") == [("cancelled",)] * 3


@pytest.mark.parametrize("inject,runs", [("crash", 2), ("oom", 1)])
def test_retries_only_for_crashes(tmp_path: Path, inject: str, runs: int) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(framework="torch", iterations=3,
                                   extra=f'inject = "{inject}"\nretries = 1',
                                   models='["alexnet-r"]'))
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == (1 if inject == "crash" else 0)
    attempts = query(tmp_path, "select attempt, status from runs order by id")
    assert [a for a, _ in attempts] == list(range(1, runs + 1))


def test_reader_during_a_run(tmp_path: Path) -> None:
    proc = start(tmp_path, iterations=25)
    wait_for(proc, "iteration", index=1)
    seen: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while proc.poll() is None:
                (n,) = query(tmp_path, "select count(*) from iterations")[0]
                seen.append(int(n))  # type: ignore[call-overload]
                time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert proc.wait(timeout=240) == 0
    reader.join()
    assert not errors
    assert len(set(seen)) > 3 and seen == sorted(seen)  # grew while the writer wrote
    assert query(tmp_path, "select count(*) from iterations") == [(3 * 26,)]
