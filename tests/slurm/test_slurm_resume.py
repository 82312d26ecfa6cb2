"""``dltop run --resume`` after the engine of a Slurm campaign was killed (real Slurm).

The batch job of the run that was going outlives its engine; resuming cancels it, so it
neither holds its nodes nor trains on beside the run that replaces it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltop.jobs.slurm import is_orphan_job

from .cluster import LocalSlurm
from .test_slurm_runs import env_for, runs, slurm_state, wait_for_run, write


def test_only_a_batch_job_not_seen_to_end_is_an_orphan() -> None:
    assert is_orphan_job(None, "12", "RUNNING") and is_orphan_job(0, "12", None)
    assert is_orphan_job(None, "12", "PENDING")
    assert not is_orphan_job(None, "12", "COMPLETED")  # ended: nothing to cancel
    assert not is_orphan_job(None, None, None)  # a local run
    # a step of the engine's own allocation: its srun (pid) is reaped; scancel of the
    # allocation would end the resuming engine too
    assert not is_orphan_job(4242, "12", "RUNNING")


@pytest.mark.slow
def test_resume_cancels_the_batch_job_a_killed_engine_left(slurm_env: LocalSlurm,
                                                          tmp_path: Path) -> None:
    prof = write(tmp_path, timeout_s=600, extra='inject = "hang"')
    env = env_for(tmp_path)
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        run = wait_for_run(tmp_path, engine, "running in Slurm",
                           lambda r: r["slurm_state"] == "RUNNING")
    finally:
        engine.send_signal(signal.SIGKILL)  # no clean-up: as a reboot or the OOM killer
        engine.communicate(timeout=30)
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
