"""Slurm at a real site, on the real single-node cluster (issue 33, items 2 and 5).

One engine on "login node" ``login1`` runs three short command jobs in Slurm, two in
flight at once (``slurm.parallel = 2``); each job has the node to itself (``exclusive``), so one
waits in the queue while the other runs. Meanwhile a second login node (``DLTOP_HOST``
= ``login2``) on the same database sees the engine by its heartbeat and may not resume
its campaign. Every ``squeue``, ``scontrol`` and ``sacct`` the engine runs goes through
a PATH wrapper that logs the call and execs the real client.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltop.procs import HEARTBEAT_S

from .cluster import LocalSlurm
from .test_slurm_resume import STEPS
from .test_slurm_runs import env_for, runs, wait_for_run

PROFILE = """
name = "polite"
[defaults]
iterations = 4
warmup = 1
timeout_s = 120
executor = "slurm"
iteration_regex = 'took (?P<seconds>[0-9.]+)s'
command = [{python}, "-c", {program}]
[[matrix]]
frameworks = ["command"]
models = ["sleeper"]
batch_sizes = [8, 16, 32]
devices = ["cpu:1"]

[slurm]
parallel = 2  # two Slurm jobs in flight (a Slurm run holds a slot, not a login-host CPU)
"""
WRAPPER = """#!/bin/sh
echo "{name} $*" >> {log}
exec {real} "$@"
"""


def wrap_clients(tmp_path: Path) -> tuple[Path, Path]:
    """A folder of logging wrappers of squeue, scontrol and sacct; (folder, log)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "slurm-calls"
    bin_dir.mkdir()
    for name in ("squeue", "scontrol", "sacct"):
        real = shutil.which(name)
        assert real is not None
        path = bin_dir / name
        path.write_text(WRAPPER.format(name=name, log=log, real=real))
        path.chmod(0o755)
    return bin_dir, log


def on(host: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env={**env, "DLTOP_HOST": host}, timeout=120)


@pytest.mark.slow
def test_one_squeue_per_poll_queue_time_apart_and_a_second_login_node(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(python=json.dumps(sys.executable),
                                   program=json.dumps(STEPS)))
    bin_dir, log = wrap_clients(tmp_path)
    env = {**env_for(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**env, "DLTOP_HOST": "login1"})
    try:
        wait_for_run(tmp_path, engine, "running in Slurm",
                     lambda r: r["slurm_state"] == "RUNNING")
        # login2: the engine's pid means nothing there, its heartbeat says it runs
        status = on("login2", env, "status")
        assert " on host login1, heartbeat " in status.stdout, status.stdout
        assert "engine NOT running" not in status.stdout
        assert "s in Slurm's queue" in status.stdout, status.stdout  # run or pending
        refused = on("login2", env, "run", "--resume", "--headless")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "is still being run by dltop (pid" in refused.stderr
        assert "on host login1" in refused.stderr
        out, err = engine.communicate(timeout=240)
    finally:
        if engine.poll() is None:
            engine.kill()
    assert engine.returncode == 0, out + err
    done = runs(tmp_path)
    assert [r["status"] for r in done] == ["ok"] * 3, done
    for r in done:
        # started_at is the job's start, wall_s its run: neither holds the wait
        assert r["queue_s"] is not None and r["queue_s"] >= 0
        assert r["submitted_at"] <= r["started_at"] < r["finished_at"]
        assert 0 < r["wall_s"] < 60
        assert r["slurm_acct_note"] == "no accounting (Slurm accounting storage is disabled)"
    # two jobs in flight on a node each takes whole: one of them waited its turn
    waited = max(r["queue_s"] for r in done)
    assert waited >= 1, done  # about a job's 3 s of steps less the submission's lag
    w = next(r for r in done if r["queue_s"] == waited)
    conn = sqlite3.connect(tmp_path / "d.db")
    created, beat = conn.execute("select created_at, engine_heartbeat_s from campaigns"
                                 ).fetchone()
    conn.close()
    created_s = calendar.timegm(time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S"))
    assert beat - created_s >= HEARTBEAT_S - 1  # refreshed while it ran

    calls = log.read_text().splitlines()
    squeues = [c for c in calls if c.startswith("squeue ")]
    ids = [c.split(" -j ", 1)[1].split()[0].split(",") for c in squeues]
    assert max(len(x) for x in ids) >= 2, squeues  # one call asked about both jobs
    per_job = [c for c in calls if c.startswith("scontrol show job")]
    assert len(per_job) == 3, per_job  # once at each job's end, not every second
    assert len([c for c in calls if c.startswith("sacct ")]) == 3
    assert len(squeues) < 120, len(squeues)

    listing = on("login2", env, "runs")
    assert listing.returncode == 0, listing.stderr
    assert "queued s" in listing.stdout and "run s" in listing.stdout, listing.stdout
    row = next(line for line in listing.stdout.splitlines()
               if line.split() and line.split()[0] == str(w["id"]))
    assert f" {w['queue_s']:.0f} " in row, row
