"""``dltop run --resume`` after the engine of a Slurm campaign was killed (real Slurm).

The batch job of the run that was going outlives its engine; resuming cancels it, so it
neither holds its nodes nor trains on beside the run that replaces it.
"""

from __future__ import annotations

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

from dltop.jobs.executors.slurm import is_orphan_job
from dltop.jobs.executors.slurm_adopt import parse_state, slurm_job_now

from .cluster import LocalSlurm
from .test_slurm_runs import env_for, runs, slurm_state, wait_for_run, write
from .test_slurm_serve import FAKE
from .test_slurm_servergroup import PROFILE, job_state, serving
from .test_slurm_servergroup_life import live_jobs


def test_only_a_batch_job_not_seen_to_end_is_an_orphan() -> None:
    assert is_orphan_job(None, "12", "RUNNING") and is_orphan_job(0, "12", None)
    assert is_orphan_job(None, "12", "PENDING")
    assert not is_orphan_job(None, "12", "COMPLETED")  # ended: nothing to cancel
    assert not is_orphan_job(None, None, None)  # a local run
    # a step of the engine's own allocation: its srun (pid) is reaped; scancel of the
    # allocation would end the resuming engine too
    assert not is_orphan_job(4242, "12", "RUNNING")


def killed_while_running(tmp_path: Path, prof: Path, env: dict[str, str]) -> dict[str, Any]:
    """``dltop run prof`` until its run is running in Slurm, then the engine SIGKILLed (no
    clean-up: as a reboot or the OOM killer); the run's row as it was then."""
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        return wait_for_run(tmp_path, engine, "running in Slurm",
                            lambda r: r["slurm_state"] == "RUNNING")
    finally:
        engine.send_signal(signal.SIGKILL)
        engine.communicate(timeout=30)


@pytest.mark.slow
def test_resume_cancels_the_batch_job_a_killed_engine_left(slurm_env: LocalSlurm,
                                                          tmp_path: Path) -> None:
    prof = write(tmp_path, timeout_s=600, extra='inject = "hang"')
    env = env_for(tmp_path)
    run = killed_while_running(tmp_path, prof, env)
    orphan = run["slurm_job_id"]
    assert slurm_state(slurm_env, orphan) == "RUNNING"  # the job outlived its engine
    resumed = subprocess.Popen([sys.executable, "-m", "dltop", "run", "--resume",
                                "--headless"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        again = wait_for_run(tmp_path, resumed, "running again in Slurm",
                             lambda r: r["id"] != run["id"] and r["slurm_state"] == "RUNNING")
        deadline = time.monotonic() + 60
        while slurm_state(slurm_env, orphan) != "CANCELLED" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slurm_state(slurm_env, orphan) == "CANCELLED"
        assert again["slurm_job_id"] != orphan
        assert slurm_state(slurm_env, again["slurm_job_id"]) == "RUNNING"
        subprocess.run([sys.executable, "-m", "dltop", "cancel"], env=env, check=True,
                       capture_output=True, timeout=60)
        _, err = resumed.communicate(timeout=120)
    finally:
        if resumed.poll() is None:
            resumed.kill()
    assert f"1 orphaned Slurm job(s) cancelled ({orphan})" in err, err
    first, second = runs(tmp_path)
    assert first["status"] == "crashed" and first["error_kind"] == "engine_lost", first
    assert second["status"] == "cancelled", second


COMMAND_PROFILE = """
name = "done"
[defaults]
iterations = 5
warmup = 1
timeout_s = 120
executor = "slurm"
iteration_regex = 'took (?P<seconds>[0-9.]+)s'
command = [{python}, "-c", {program}]
[[matrix]]
frameworks = ["command"]
models = ["sleeper"]
batch_sizes = [8]
devices = ["cpu:1"]
"""
STEPS = ("import time\nfor i in range(6):\n    time.sleep(0.5)\n"
         "    print('step %d took 0.5s' % i, flush=True)\n")


def test_slurm_s_answers_about_a_job_are_parsed() -> None:
    assert parse_state("COMPLETED\n") == "COMPLETED" and parse_state("") is None
    assert parse_state("CANCELLED by 0\n") == "CANCELLED" and parse_state("\n") is None


def test_a_job_slurm_forgot_is_completed_by_its_runner_s_exit_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over MinJobAge without accounting, neither squeue nor sacct knows the job."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    now = slurm_job_now("77", os.environ, tmp_path)
    assert now.state is None and "neither squeue nor sacct" in now.source
    (tmp_path / "runner-exit").write_text("1\n")
    assert slurm_job_now("77", os.environ, tmp_path).state is None  # failed: re-run
    (tmp_path / "runner-exit").write_text("0\n")
    assert slurm_job_now("77", os.environ, tmp_path).state == "COMPLETED"


@pytest.mark.slow
def test_resume_keeps_a_job_that_completed_after_its_engine_died(slurm_env: LocalSlurm,
                                                                 tmp_path: Path) -> None:
    """The job is not cancelled (scancel would exit 0 anyway) nor re-run: its events
    file is read and the run ends ok with its iterations. No accounting here: squeue
    answers, within MinJobAge."""
    prof = tmp_path / "p.toml"  # a command job: no framework to import, about 3 s
    prof.write_text(COMMAND_PROFILE.format(python=json.dumps(sys.executable),
                                           program=json.dumps(STEPS)))
    env = env_for(tmp_path)
    run = killed_while_running(tmp_path, prof, env)
    job = run["slurm_job_id"]
    deadline = time.monotonic() + 90
    while slurm_state(slurm_env, job) != "COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert slurm_state(slurm_env, job) == "COMPLETED"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"1 finished Slurm run kept ({run['id']})" in res.stderr, res.stderr
    (kept,) = runs(tmp_path)  # not re-run
    assert kept["status"] == "ok" and kept["n_iterations"] == 5, kept
    assert "kept at resume" in kept["note"]
    conn = sqlite3.connect(tmp_path / "d.db")
    (n,) = conn.execute("select count(*) from iterations where run_id = ? and not warmup",
                        [kept["id"]]).fetchone()
    conn.close()
    assert n == 5


@pytest.mark.slow
def test_resume_cancels_the_group_server_job_a_killed_engine_left(slurm_env: LocalSlurm,
                                                                  tmp_path: Path) -> None:
    # A group's server job is no run's: it was left to its heartbeat (60 s; 600 s here,
    # so only the resume can end it). Its id is in server/step of the first run's folder.
    prof = tmp_path / "group.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE,
                                   entry="iterations = 300\nconcurrency = [1, 2]"))
    env = {**env_for(tmp_path), "DLTOP_SERVER_HEARTBEAT_LOST_S": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        group_job = serving(tmp_path, proc)["slurm_job_id"]
        proc.kill()  # as the OOM killer would: no clean-up
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads((tmp_path / "d-runs" / "run-1" / "server" / "step").read_text()) == {
        "job": group_job}
    assert job_state(slurm_env, group_job) == "RUNNING"  # it outlived its engine
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert job_state(slurm_env, group_job) in ("CANCELLED", "(forgotten)")
    assert [j for j in live_jobs(slurm_env) if j.startswith("dltop")] == []
    assert [r["status"] for r in runs(tmp_path)].count("ok") == 2, runs(tmp_path)
