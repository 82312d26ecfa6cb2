"""Issue 41 on Slurm, a server group's job (``server_scope = "group"``) around its runs:
the group job's time in Slurm's queue is its first run's ``queue_s`` (the later runs'
steps wait for none), each run's accounting is its own step's, a server that does not
start fails the group's runs without submitting anything more, and a run that raises
gives back the group's turn (the engine does not hang on it)."""

from __future__ import annotations

import calendar
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltop.jobs.executors.slurm_acct import parse_sacct_usage

from .cluster import NODE, LocalSlurm
from .test_slurm_runs import env_for, runs
from .test_slurm_serve import FAKE
from .test_slurm_servergroup import PROFILE, serving, start

NO_ACCT = "no accounting (Slurm accounting storage is disabled)"
"""The test cluster keeps no accounting (no slurmdbd): what every Slurm run stores."""


def jobs_of(slurm: LocalSlurm, under: Path) -> dict[str, dict[str, str]]:
    """The controller's jobs (ended ones too, for MinJobAge) by name, those whose output
    is under ``under`` only: the cluster is the suite's, and another test's run 2 also
    names its server's job ``dltop-server-2``."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True,
                         env=slurm.env, check=False).stdout
    got = {}
    for line in out.splitlines():
        fields = dict(w.partition("=")[::2] for w in line.split() if "=" in w)
        if fields.get("StdOut", "").startswith(str(under)):
            got[fields["JobName"]] = fields
    return got


def live_jobs(slurm: LocalSlurm) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%j %T"], capture_output=True, text=True,
                          env=slurm.env, check=True).stdout.splitlines()


def epoch(slurm_time: str) -> float:
    return time.mktime(time.strptime(slurm_time, "%Y-%m-%dT%H:%M:%S"))


def utc_epoch(iso: str) -> float:
    return calendar.timegm(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) + float(iso[19:-1])


@pytest.mark.slow
def test_the_group_job_s_queue_time_is_its_first_run_s_and_each_step_is_accounted(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    # another job holds the node: the group's job (exclusive) waits behind it
    subprocess.run(["sbatch", "--exclusive", "--job-name=blocker", "-o", "/dev/null",
                    "--wrap", "sleep 8"], env=slurm_env.env, check=True, capture_output=True)
    proc = start(tmp_path, "iterations = 4\nconcurrency = [1, 2]")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    first, second = runs(tmp_path)
    assert first["status"] == second["status"] == "ok", (first, second)
    job = jobs_of(slurm_env, tmp_path)["dltop-server-1"]
    assert job["JobId"] == first["slurm_job_id"] == second["slurm_job_id"]
    # the first run waited for the group's job: Slurm's own start, from dltop's submission
    assert first["queue_s"] >= 2.0, first
    start_s = epoch(job["StartTime"])
    assert abs(utc_epoch(first["started_at"]) - start_s) < 1.0, (first, job)
    assert abs(utc_epoch(first["started_at"]) - utc_epoch(first["submitted_at"])
               - first["queue_s"]) < 0.01
    assert epoch(job["SubmitTime"]) - 1 <= utc_epoch(first["submitted_at"]) <= \
        epoch(job["SubmitTime"]) + 1
    # the second run's step started in the running allocation: no wait, no submission
    assert second["queue_s"] == 0.0 and second["submitted_at"] is None, second
    # each run's accounting is asked of its own step (the cluster keeps none: it says so)
    steps = []
    for run in (first, second):
        assert run["slurm_acct_note"] == NO_ACCT, run
        env = (tmp_path / "d-runs" / f"run-{run['id']}" / "job-env").read_text()
        steps.append(re.search(r"^SLURM_STEP_ID=(\d+)$", env, re.M).group(1))  # type: ignore[union-attr]
        assert f"SLURM_JOB_NODELIST={NODE}" in env
    assert steps[0] != steps[1], steps


def test_a_step_s_accounting_is_its_own_line_not_the_job_s() -> None:
    # sacct -n -P -j 41.1 on 22.05 lists the step; with -j 41 the job and every step
    job = ("41|RUNNING|30||\n41.batch|RUNNING|30|900M|0\n41.0|COMPLETED|9|200M|0\n"
           "41.1|OUT_OF_MEMORY|12|300M|0\n41.10|COMPLETED|3|800M|0\n")
    step = parse_sacct_usage(job, "41.1")
    assert step is not None
    assert (step.state, step.elapsed_s, step.max_rss_bytes) == ("OUT_OF_MEMORY", 12.0,
                                                                300 * 1024**2)
    whole = parse_sacct_usage(job, "41")
    assert whole is not None and whole.max_rss_bytes == 900 * 1024**2
    assert parse_sacct_usage("41|CANCELLED by 0|5|1K|0\n", "41").state == "CANCELLED"  # type: ignore[union-attr]
    assert parse_sacct_usage(job, "41.2") is None  # not recorded yet


DIES = ("[servers.dies]\ncommand = \"sh -c 'echo cannot load the model >&2; exit 3' sh "
        "{port}\"\n", "server command exited with status 3 before it was ready")
SILENT = ("[servers.dies]\ncommand = \"sh -c 'echo loading forever; exec sleep 60' sh "
          "{port}\"\ntimeout_s = 3\n", "after 3 s (timeout_s)")


@pytest.mark.slow
@pytest.mark.parametrize(("server", "why"), [DIES, SILENT], ids=["exits", "ready-timeout"])
def test_a_group_server_that_does_not_start_fails_the_group_and_submits_nothing_more(
        slurm_env: LocalSlurm, tmp_path: Path, server: str, why: str) -> None:
    prof = tmp_path / "dies.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE,
                                   entry="concurrency = [1, 2]").replace(
        'server = "fake"', 'server = "dies"') + server)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                          capture_output=True, text=True, env=env_for(tmp_path), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 60
    first, second = runs(tmp_path)
    assert first["status"] == second["status"] == "setup_failed", (first, second)
    assert first["error_kind"] == second["error_kind"] == "setup"
    assert why in first["error_message"], first
    tail = "cannot load the model" if server is DIES[0] else "loading forever"
    assert tail in first["error_message"] and tail in first["log_tail"], first
    # the second run names the first's failure; it submitted nothing
    assert second["error_message"].startswith(
        f"the group's server failed to start for run {first['id']}: "), second
    assert why in second["error_message"]
    # one job in all (the group's); neither run submitted its own; none left queued
    assert sorted(j for j in jobs_of(slurm_env, tmp_path) if j.startswith("dltop")) == [
        "dltop-server-1"]
    assert first["slurm_job_id"] is None and second["slurm_job_id"] is None
    assert [j for j in live_jobs(slurm_env) if j.startswith("dltop")] == []


@pytest.mark.slow
def test_a_run_that_raises_gives_back_its_group_s_turn(slurm_env: LocalSlurm,
                                                       tmp_path: Path) -> None:
    # Two runs of a group in Slurm at once (parallel = 2): the second waits for the
    # first's turn. The first's end cannot be stored (a column renamed under the engine:
    # the store raises, the campaign stops); the second gets the turn and is cancelled
    # with the campaign, and the engine ends: before, it waited for that turn for ever.
    prof = tmp_path / "group.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE, entry=(
        'iterations = 8\nrequest_rate = [1, 50]\narrival = "constant"')) + "parallel = 2\n")
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for(tmp_path))
    try:
        serving(tmp_path, proc)
        deadline = time.monotonic() + 60
        while len(runs(tmp_path)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        conn = sqlite3.connect(tmp_path / "d.db", isolation_level=None)
        conn.execute("alter table runs rename column final_loss to final_loss_renamed")
        conn.close()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "final_loss" in err, out + err
    assert "Traceback" not in err, err
    # the group's job (and the second run's, should it have got the turn before the
    # campaign's stop) scancelled: nothing left in Slurm
    assert "dltop-server-1" in jobs_of(slurm_env, tmp_path)
    assert [j for j in live_jobs(slurm_env) if j.startswith("dltop")] == []
    # the column back: the campaign is taken up where it stopped, the group runs
    conn = sqlite3.connect(tmp_path / "d.db", isolation_level=None)
    conn.execute("alter table runs rename column final_loss_renamed to final_loss")
    conn.close()
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--resume", "--headless"],
                         capture_output=True, text=True, env=env_for(tmp_path), timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    done = [r["status"] for r in runs(tmp_path)]
    assert done.count("ok") == 2, runs(tmp_path)
