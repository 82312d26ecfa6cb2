"""cpus:P data-parallel runs with real gloo ranks: success, a dying rank, a hang (the scaling
table's arithmetic: tests/results/test_summary.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop.errors import UserError
from dltop.profiles.loader import parse


@pytest.fixture
def profile(profile_text: Any) -> Callable[..., str]:
    """The fcn-r profile on ``devices``, with ``extra`` TOML lines."""
    def text(devices: list[str], extra: str = "", timeout: int = 120) -> str:
        return profile_text({
            "frameworks": ["torch"], "models": ["fcn-r"], "batch_sizes": [32],
            "devices": devices, "iterations": 4, "warmup": 1, "timeout_s": timeout,
        }, name="dp", extra=extra)

    return text


def run(tmp_path: Path, profile: str, *args: str) -> subprocess.CompletedProcess[str]:
    prof = tmp_path / "p.toml"
    prof.write_text(profile)
    return subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db",
                           str(tmp_path / "d.db"), "--headless", *args],
                          capture_output=True, text=True, timeout=300)


def db_rows(tmp_path: Path, sql: str) -> list[tuple[object, ...]]:
    import sqlite3

    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
def test_two_gloo_ranks_run_and_scale(tmp_path: Path, profile: Any,
                                      other_runners: Any, wait_until: Any) -> None:
    """cpus:1 then cpus:2; the cpus:2 run: torchrun (standalone rendezvous) starts the
    ranks, the runner relays."""
    with other_runners(tmp_path) as others:
        res = run(tmp_path, profile(["cpus:1", "cpus:2"]))
    assert res.returncode == 0, res.stderr + res.stdout
    assert [r[0] for r in db_rows(tmp_path, "select status from runs")] == ["ok", "ok"]
    # the run's own ranks (torchrun's workers, grandchildren of the engine) are not
    # "other runs sharing the host": the table would mark cpus:2 with a dagger (another
    # test's runner beside this one, under `pytest -n`, rightly counts)
    concurrent = [r[0] for r in db_rows(tmp_path, "select concurrent_runs from runs")]
    assert concurrent == [0, 0] or others, (concurrent, others)
    extra = [json.loads(str(r[0])) for r in db_rows(tmp_path, "select extra from environment")]
    assert [e["world_size"] for e in extra] == [1, 2]
    assert len(extra[0]["cpu_affinity"]) == 1 and len(extra[1]["cpu_affinity"]) == 1  # per rank
    (samples,) = db_rows(tmp_path, "select samples from iterations where run_id = 2 limit 1")
    assert samples == (32,)  # global batch: 16 per rank
    out = subprocess.run([sys.executable, "-m", "dltop", "export", "--db",
                          str(tmp_path / "d.db"), "--table", "scaling", "--format", "json"],
                         capture_output=True, text=True)
    rows = json.loads(out.stdout)["rows"]
    assert [r["device"] for r in rows] == ["cpus:1", "cpus:2"]
    assert rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[1]["speedup"] > 0 and rows[1]["efficiency"] == pytest.approx(
        rows[1]["speedup"] / 2)
    # the cpus:2 run (run 2) went through torchrun
    ((extra2,),) = db_rows(tmp_path, "select extra from environment where run_id = 2")
    facts = json.loads(str(extra2))
    assert (facts["launcher"], facts["nodes"], facts["world_size"]) == ("torchrun", 1, 2)
    run_dir = tmp_path / "d-runs" / "run-2"
    log = (run_dir / "runner.log").read_text()
    assert "-m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 0" in log
    assert "MASTER_PORT" not in log and not (run_dir / "events.fifo").exists()
    wait_until(lambda: not ranks_alive(run_dir / "spec.json"), 30, "every rank to end")


@pytest.mark.slow
def test_a_dying_rank_fails_the_run_and_leaves_nothing(tmp_path: Path, group_members: Any,
                                                      profile: Any) -> None:
    res = run(tmp_path, profile(["cpus:2"], 'inject = "crash-rank1"'))
    assert res.returncode == 1
    ((status, pgid),) = db_rows(tmp_path, "select status, pgid from runs")
    assert status == "crashed"
    assert group_members(int(pgid)) == []  # type: ignore[call-overload]


def test_bad_worker_counts(profile: Any) -> None:
    with pytest.raises(UserError, match="cpus:0"):
        parse(profile(["cpus:0"], timeout=10), "p.toml", "p")
    with pytest.raises(UserError, match="does not divide over 3 workers"):
        parse(profile(["cpus:3"], timeout=10), "p.toml", "p")


def ranks_alive(spec_path: Path) -> list[int]:
    """Live processes running this spec: launcher, torchrun agent, ranks (any session)."""
    import psutil

    alive = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if str(spec_path) in (p.info["cmdline"] or []) and p.info["status"] != "zombie":
            alive.append(p.pid)
    return alive


@pytest.mark.slow
def test_a_hung_run_leaves_no_rank_in_any_session(tmp_path: Path, profile: Any,
                                                  wait_until: Any, group_members: Any) -> None:
    """torchrun starts each rank in a session of its own: the timeout must still end them
    (the run's process group and every rank)."""
    res = run(tmp_path, profile(["cpus:2"], 'inject = "hang"', 15))
    assert res.returncode == 1
    ((status, pgid),) = db_rows(tmp_path, "select status, pgid from runs")
    assert status == "timeout"
    assert group_members(int(pgid)) == []  # type: ignore[call-overload]
    spec_path = tmp_path / "d-runs" / "run-1" / "spec.json"
    wait_until(lambda: not ranks_alive(spec_path), 30, "every rank to end")
