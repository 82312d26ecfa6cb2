"""TensorFlow ``cpus:P`` runs through the engine, as tests/core/test_data_parallel.py does for
PyTorch: a cpus:1/cpus:2 campaign and its scaling table, a dying worker, a hang."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]


@pytest.fixture
def profile(profile_text: Any) -> Callable[..., str]:
    """The TensorFlow fcn-r profile on ``devices``, with ``extra`` TOML lines."""
    def text(devices: list[str], extra: str = "", timeout: int = 240) -> str:
        return profile_text({
            "frameworks": ["tensorflow"], "models": ["fcn-r"], "batch_sizes": [32],
            "devices": devices, "iterations": 5, "warmup": 1, "timeout_s": timeout,
        }, name="tfdp", extra=extra)

    return text


def run(tmp_path: Path, profile: str) -> subprocess.CompletedProcess[str]:
    prof = tmp_path / "p.toml"
    prof.write_text(profile)
    return subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db",
                           str(tmp_path / "d.db"), "--headless"],
                          capture_output=True, text=True, timeout=600)


def db_rows(tmp_path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def export(tmp_path: Path, fmt: str) -> str:
    out = subprocess.run([sys.executable, "-m", "dltop", "export", "--db",
                          str(tmp_path / "d.db"), "--table", "scaling", "--format", fmt],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_two_workers_run_and_scale(tmp_path: Path, profile: Any, other_runners: Any) -> None:
    with other_runners(tmp_path) as others:
        res = run(tmp_path, profile(["cpus:1", "cpus:2"]))
    assert res.returncode == 0, res.stderr + res.stdout
    assert [r[0] for r in db_rows(tmp_path, "select status from runs order by id")] == [
        "ok", "ok"]
    # worker 0's own workers are not other runs sharing the host (another test's runner
    # beside this one, under `pytest -n`, rightly counts)
    concurrent = [r[0] for r in db_rows(tmp_path, "select concurrent_runs from runs order by id")]
    assert concurrent == [0, 0] or others, (concurrent, others)
    extra = [json.loads(str(r[0])) for r in db_rows(
        tmp_path, "select extra from environment order by run_id")]
    assert [e["world_size"] for e in extra] == [1, 2]
    assert len(extra[0]["cpu_affinity"]) == 1 and len(extra[1]["cpu_affinity"]) == 1  # per worker
    assert [e["intra_op_threads"] for e in extra] == [1, 1]
    (samples,) = db_rows(tmp_path, "select samples from iterations where run_id = 2 limit 1")
    assert samples == (32,)  # global batch: 16 per worker
    rows = json.loads(export(tmp_path, "json"))["rows"]
    assert [(r["framework"], r["device"]) for r in rows] == [("tensorflow", "cpus:1"),
                                                             ("tensorflow", "cpus:2")]
    assert rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[1]["speedup"] > 0 and rows[1]["efficiency"] == pytest.approx(
        rows[1]["speedup"] / 2)
    assert "| cpus:2 |" in export(tmp_path, "md")


def test_a_dying_worker_fails_the_run_and_leaves_nothing(tmp_path: Path, group_members: Any,
                                                        profile: Any) -> None:
    res = run(tmp_path, profile(["cpus:2"], 'inject = "crash-rank1"'))
    assert res.returncode == 1
    ((status, pgid, message),) = db_rows(tmp_path, "select status, pgid, error_message from runs")
    assert status == "crashed"
    assert "TensorFlow worker 1 of 2" in message
    assert group_members(int(pgid)) == []


def test_timeout_kills_every_worker(tmp_path: Path, group_members: Any, profile: Any) -> None:
    res = run(tmp_path, profile(["cpus:2"], 'inject = "hang"', 25))
    assert res.returncode == 1
    ((status, pgid),) = db_rows(tmp_path, "select status, pgid from runs")
    assert status == "timeout"
    assert group_members(int(pgid)) == []
