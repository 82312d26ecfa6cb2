"""``dltop run`` on the Slurm executor against a real single-node Slurm (see conftest.py).

Each run is one Slurm job submitted with sbatch; the engine follows it with scontrol
and tails its events file. One host gives one Slurm node, so every job here has
``nodes = 1``; the multi-node path (torchrun's c10d rendezvous over nodes) is proven
by the torchrun two-agent test on 127.0.0.1 (tests/runners), and the scripts
generated for nodes > 1 are checked in test_slurm_scripts.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from dltop.live.campaign import read_jobs

from .cluster import NODE, LocalSlurm

PROFILE = """
name = "sl"
[defaults]
iterations = {iterations}
warmup = 1
timeout_s = {timeout_s}
executor = "slurm"
{extra}
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
{slurm}
"""


def write(tmp_path: Path, *, iterations: int = 3, timeout_s: int = 180, extra: str = "",
          slurm: str = "") -> Path:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.format(iterations=iterations, timeout_s=timeout_s, extra=extra,
                                   slurm=slurm))
    return path


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}


def dltop(tmp_path: Path, *args: str, timeout: float = 240,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env=env or env_for(tmp_path), timeout=timeout)


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(tmp_path / "d.db")
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("select * from runs order by id")]
    except sqlite3.OperationalError:  # the engine has not created its tables yet
        return []
    finally:
        conn.close()


def wait_for_run(tmp_path: Path, proc: subprocess.Popen[str], what: str,
                 cond: Any, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"dltop run ended early: {proc.communicate()}"
        for run in runs(tmp_path):
            if cond(run):
                return run
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"no run {what} within {timeout_s:g} s: {runs(tmp_path)}")


def slurm_state(cluster: LocalSlurm, job_id: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", job_id)
    return out.split("JobState=", 1)[1].split()[0]


@pytest.mark.slow
def test_a_job_runs_through_sbatch(slurm_env: LocalSlurm, tmp_path: Path) -> None:
    """Under a site's SBATCH_EXPORT=NONE (and srun's SLURM_EXPORT_ENV=NONE) too: dltop
    exports explicitly, and stores the variables as the runner had them."""
    env = {**env_for(tmp_path), "SBATCH_EXPORT": "NONE", "SLURM_EXPORT_ENV": "NONE",
           # nor does a site's sbatch variable reshape the job: no array of it
           "SBATCH_ARRAY_INX": "0-3"}
    # a setup line that changes a variable dltop sets: the stored one is the job's
    prof = write(tmp_path, slurm='[slurm]\nsetup = ["export MKL_NUM_THREADS=3"]')
    res = dltop(tmp_path, "run", str(prof), "--headless", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = runs(tmp_path)
    assert run["status"] == "ok", run
    assert run["slurm_job_id"] and run["slurm_job_id"].isdigit()
    assert run["slurm_nodes"] == NODE
    assert run["slurm_state"] == "COMPLETED"
    assert not slurm_env.run("squeue", "-h", "-o", "%i").split()  # no array task left
    # runners of other engines on this (login) host never count against a Slurm run
    assert run["concurrent_runs"] == 0 and run["cpu_affinity"] is None
    assert run["log_path"] == str(tmp_path / "d-runs" / f"run-{run['id']}" / "runner.log")
    conn = sqlite3.connect(tmp_path / "d.db")
    (n,) = conn.execute("select count(*) from iterations where run_id = ? and not warmup",
                        [run["id"]]).fetchone()
    # the node's agent: its host windows stored with the node's name
    nodes = conn.execute("select distinct node from host_samples where run_id = ?",
                         [run["id"]]).fetchall()
    conn.close()
    assert n == 3
    assert nodes == [(NODE,)]
    conn = sqlite3.connect(tmp_path / "d.db")
    thread_env, extra = conn.execute("select thread_env, extra from environment "
                                     "where run_id = ?", [run["id"]]).fetchone()
    conn.close()
    assert json.loads(thread_env)["OMP_NUM_THREADS"] == "1"  # reached the runner
    assert json.loads(thread_env)["MKL_NUM_THREADS"] == "3"  # as it was, not as sent
    job_env = json.loads(extra)["job_env"]
    assert job_env["SLURM_JOB_NODELIST"] == NODE and job_env["CUDA_VISIBLE_DEVICES"] == ""
    rundir = tmp_path / "d-runs" / f"run-{run['id']}"
    assert "srun --nodes=1" in (rundir / "batch.sh").read_text()
    assert '"event": "done"' in (rundir / "events.jsonl").read_text().replace('":"', '": "')


@pytest.mark.slow
def test_cancel_scancels_a_running_job(slurm_env: LocalSlurm, tmp_path: Path) -> None:
    prof = write(tmp_path, timeout_s=600, extra='inject = "hang"')
    env = env_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        run = wait_for_run(tmp_path, proc, "running in Slurm",
                           lambda r: r["slurm_state"] == "RUNNING")
        assert slurm_state(slurm_env, run["slurm_job_id"]) == "RUNNING"
        assert dltop(tmp_path, "cancel", env=env).returncode == 0
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = runs(tmp_path)
    assert run["status"] == "cancelled", (run, out, err)
    assert run["slurm_state"] == "CANCELLED"
    # scancel'd, as the controller says too (MinJobAge keeps it a few seconds)
    assert slurm_state(slurm_env, run["slurm_job_id"]) == "CANCELLED"


@pytest.mark.slow
def test_timeout_scancels_the_job(slurm_env: LocalSlurm, tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", str(write(tmp_path, timeout_s=10, extra='inject = "hang"')),
                "--headless")
    assert res.returncode == 1, res.stdout + res.stderr
    (run,) = runs(tmp_path)
    assert run["status"] == "timeout", run
    assert "timeout_s = 10" in run["error_message"]
    assert run["slurm_state"] == "CANCELLED"


@pytest.mark.slow
def test_a_pending_job_shows_as_pending_then_cancels(slurm_env: LocalSlurm,
                                                     tmp_path: Path) -> None:
    # --begin keeps the job in the queue (reason BeginTime) as a busy cluster would
    prof = write(tmp_path, slurm='[slurm]\nextra_args = ["--begin=now+1hour"]')
    env = env_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        run = wait_for_run(tmp_path, proc, "pending", lambda r: r["slurm_state"] == "PENDING")
        assert run["status"] == "running" and run["slurm_reason"] == "BeginTime"
        db = sqlite_utils.Database(tmp_path / "d.db")
        (line,) = read_jobs(db, run["campaign_id"], 0, 10)
        db.close()
        assert line.status == "pending (BeginTime)"
        status = dltop(tmp_path, "status", env=env)
        assert "pending in Slurm's queue (BeginTime)" in status.stdout, status.stdout
        listing = dltop(tmp_path, "runs", "--json", env=env)
        assert json.loads(listing.stdout)[0]["status"] == "pending", listing.stdout
        assert dltop(tmp_path, "cancel", env=env).returncode == 0
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = runs(tmp_path)
    assert run["status"] == "cancelled"
    assert run["slurm_state"] == "CANCELLED"


def test_slurm_executor_without_sbatch_exits_2(tmp_path: Path) -> None:
    env = {**env_for(tmp_path), "PATH": str(tmp_path / "empty")}
    res = dltop(tmp_path, "run", str(write(tmp_path)), "--headless", env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert 'executor = "slurm"' in res.stderr and "sbatch" in res.stderr
    assert "apt-get install" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "d.db").exists()


@pytest.mark.slow
def test_inside_an_allocation_the_run_is_a_step_of_it(slurm_env: LocalSlurm,
                                                       tmp_path: Path) -> None:
    # salloc runs dltop here with SLURM_JOB_ID set: batch.sh's srun becomes a step. The
    # allocation has two tasks (SLURM_NTASKS=2 in dltop's environment): the step still
    # runs the one runner asked for (issue 38: two ran, and the run was stored ok).
    res = subprocess.run(["salloc", "--nodes=1", "--ntasks=2", "--job-name=outer",
                          sys.executable, "-m", "dltop", "run", str(write(tmp_path)),
                          "--headless"],
                         capture_output=True, text=True, env=env_for(tmp_path), timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = runs(tmp_path)
    assert run["status"] == "ok", run
    assert run["protocol_errors"] == 0, run
    events = (tmp_path / "d-runs" / f"run-{run['id']}" / "events.jsonl").read_text()
    assert events.count('"event":"hello"') == 1, events
    outer = res.stderr.split("Granted job allocation ", 1)[1].split()[0]
    assert run["slurm_job_id"] == outer
    # stored as a batch job's: its end state and the allocation's node
    assert run["slurm_state"] == "COMPLETED" and run["slurm_nodes"] == NODE
    assert (tmp_path / "d-runs" / f"run-{run['id']}" / "events.jsonl").stat().st_size > 0


@pytest.mark.slow
def test_a_node_failure_ends_the_run_crashed_with_the_slurm_state(slurm_env: LocalSlurm,
                                                                  tmp_path: Path) -> None:
    prof = write(tmp_path, timeout_s=600, extra='inject = "hang"')
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for(tmp_path))
    try:
        wait_for_run(tmp_path, proc, "running in Slurm", lambda r: r["slurm_state"] == "RUNNING")
        # the node goes down under the job: Slurm ends it NODE_FAIL
        slurm_env.run("scontrol", "update", f"NodeName={NODE}", "State=DOWN",
                      "Reason=dltop-test")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(RuntimeError):  # slurmd registers again by itself
            slurm_env.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME")
        wait_idle(slurm_env)
    (run,) = runs(tmp_path)
    assert run["status"] == "crashed", (run, out, err)
    assert run["slurm_state"] == "NODE_FAIL"
    assert f"Slurm job {run['slurm_job_id']} ended NODE_FAIL" in run["error_message"]
    # the failed node, named (its down state is gone when slurmd registered again)
    assert run["error_message"].endswith(f" on node {NODE}") or \
        f" on node {NODE} (down: dltop-test)" in run["error_message"], run["error_message"]


def wait_idle(cluster: LocalSlurm, timeout_s: float = 150.0) -> None:
    # slurmctld's own node state: sinfo went on saying "mixed" for a while after the
    # node returned with nothing allocated (two slurmd on one host, CPUAlloc=0).
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fields = dict(x.split("=", 1) for x in cluster.run(
            "scontrol", "show", "node", NODE, "-o").split() if "=" in x)
        if fields.get("State") == "IDLE" and fields.get("CPUAlloc") == "0":
            return
        time.sleep(0.5)
    raise AssertionError(f"node {NODE} not idle again: {cluster.run('sinfo', '-N', '-l')}")


def test_a_refused_submission_fails_the_run_with_sbatch_s_reason(slurm_env: LocalSlurm,
                                                                tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", str(write(tmp_path, slurm='[slurm]\npartition = "nope"')),
                "--headless")
    assert res.returncode == 1, res.stdout + res.stderr
    (run,) = runs(tmp_path)
    assert run["status"] == "crashed" and run["slurm_job_id"] is None
    assert "sbatch failed" in run["error_message"]
    assert "partition" in run["error_message"].lower()


@pytest.mark.slow
def test_a_failing_setup_line_is_setup_failed_not_retried(slurm_env: LocalSlurm,
                                                          tmp_path: Path) -> None:
    # a missing `source` file: bash under set -e ends the script without the ERR trap
    # (a `module load` that fails: test_slurm_shape.py, the same trap without a cluster)
    prof = write(tmp_path, extra="retries = 2",
                 slurm='[slurm]\nexclusive = false\n'
                       'setup = ["true", "source /missing/venv/bin/activate"]')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 1, res.stdout + res.stderr
    (run,) = runs(tmp_path)  # once: the same line would fail again
    assert run["status"] == "setup_failed", run
    assert run["error_message"] == ("setup line 2 failed: source /missing/venv/bin/activate: "
                                    "no such file /missing/venv/bin/activate")
    assert run["slurm_state"] == "FAILED"
    assert run["note"] == "nodes shared with other jobs (slurm.exclusive = false)"


@pytest.mark.slow
def test_a_container_that_does_not_start_is_setup_failed_not_retried(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    # This cluster has no pyxis: srun refuses --container-image before node.sh runs,
    # as it fails when pyxis cannot import the image.
    prof = write(tmp_path, extra="retries = 2",
                 slurm='[slurm]\nexclusive = false\ncontainer = "nvcr.io#nope/none:1"')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 1, res.stdout + res.stderr
    (run,) = runs(tmp_path)
    assert run["status"] == "setup_failed", run
    assert run["error_message"].startswith(
        "the container nvcr.io#nope/none:1 did not start (pyxis: srun exit "), run
