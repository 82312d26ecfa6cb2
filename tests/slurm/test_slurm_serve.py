"""Issue 41 item 7: a serve job on the Slurm executor with ``server_scope = "run"`` is one
Slurm job (a group's runs sharing one: test_slurm_servergroup.py), the server dltop
starts (tests/programs/fake_openai.py on ``{port}``) and its client in one allocation,
on the allocated node; the server's log in the run folder; the server gone after the
job, also when dltop scancels it mid-run (its timeout). An endpoint-only serve job on
Slurm is refused (exit 2, file and key)."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_script import node_script
from dltop.jobs.executors.slurm_serve import GRACE_S
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse

from .cluster import NODE, LocalSlurm
from .test_slurm_runs import dltop, env_for, runs

FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"

PROFILE = """[servers.fake]
command = "sh -c 'echo DEVICES=$1; exec {python} {fake} --port $0 --ready-after-s 0.4 \
--ttft-ms 5 --itl-ms 2' {{port}} {{devices}}"
timeout_s = 30
[defaults]
frameworks = ["openai"]
mode = "serve"
executor = "slurm"
new_tokens = 4
prompt_tokens = 4
warmup = 1
concurrency = 2
[[matrix]]
models = ["steady"]
server = "fake"
{entry}
"""


def write(tmp_path: Path, entry: str) -> Path:
    path = tmp_path / "serve.toml"
    path.write_text(PROFILE.format(python=sys.executable, fake=FAKE, entry=entry))
    return path


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def server_ids(rundir: Path) -> tuple[int, int, int]:
    """The started server's (pid, ppid, pgid), from the first line of its log."""
    lines = (rundir / "server.log").read_text().splitlines()
    first = next(line for line in lines if line.startswith("PID "))
    pid, ppid, pgid = map(int, re.findall(r"\d+", first))
    return pid, ppid, pgid


def stored(tmp_path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
def test_a_serve_job_runs_server_and_client_in_one_slurm_job(slurm_env: LocalSlurm,
                                                              tmp_path: Path) -> None:
    # Two runs of one server (a concurrency sweep) with server_scope = "run": on Slurm
    # each is a job of its own, each with its own server in it.
    # Slurm's GPU plugin sets the step's CUDA_VISIBLE_DEVICES; this cluster has no GPUs,
    # so a setup line stands in for it: {devices} must be the step's, not the engine's.
    prof = write(tmp_path, 'iterations = 6\ntimeout_s = 120\nconcurrency = [1, 2]\n'
                 'server_scope = "run"\n[slurm]\nsetup = ["export CUDA_VISIBLE_DEVICES=3"]')
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 0, res.stdout + res.stderr
    done = runs(tmp_path)
    assert len(done) == 2 and len({r["slurm_job_id"] for r in done}) == 2
    pids = []
    for run in done:
        assert run["status"] == "ok", run
        assert run["slurm_job_id"] and run["slurm_state"] == "COMPLETED"
        assert run["slurm_nodes"] == NODE
        assert 0.4 <= run["server_cold_start_s"] < 30  # its own server, started cold
        ((n,),) = stored(tmp_path, "select count(*) from serve_requests where run_id = ? "
                         "and error is null and not warmup", run["id"])
        assert n == 6
        rundir = tmp_path / "d-runs" / f"run-{run['id']}"
        assert (rundir / "server.log").stat().st_mode & 0o777 == 0o600
        pid, ppid, pgid = server_ids(rundir)
        # leading its own group (stopped as a whole), started by the runner in the step
        assert pgid == pid and ppid != pid
        pids.append(pid)
        runner_log = (rundir / "runner.log").read_text()
        assert "server ready at http://127.0.0.1:" in runner_log, runner_log
        assert "server stopped (exit status -15)" in runner_log, runner_log
        # the server ran in the step on the allocated node, on the step's devices
        job_env = (rundir / "job-env").read_text()
        assert f"SLURM_JOB_NODELIST={NODE}" in job_env
        assert "CUDA_VISIBLE_DEVICES=3" in job_env
        assert (rundir / "server.log").read_text().splitlines()[0] == "DEVICES=3"
    assert pids[0] != pids[1]
    assert all(gone(p) for p in pids)


@pytest.mark.slow
def test_a_timeout_scancels_the_job_and_the_server_goes_with_it(slurm_env: LocalSlurm,
                                                                 tmp_path: Path) -> None:
    # A slow load (1 request/s for 100 s) with a 12 s deadline: dltop scancels the job
    # mid-load; the server, in its own process group, must not outlive it.
    prof = write(tmp_path, 'iterations = 100\nrequest_rate = 1\narrival = "constant"\n'
                 "timeout_s = 12\nserver_scope = \"run\"")
    res = dltop(tmp_path, "run", str(prof), "--headless")
    assert res.returncode == 1, res.stdout + res.stderr
    (run,) = runs(tmp_path)
    assert run["status"] == "timeout", run
    assert run["slurm_state"] == "CANCELLED"
    rundir = tmp_path / "d-runs" / f"run-{run['id']}"
    pid, _, pgid = server_ids(rundir)
    assert pgid == pid
    assert "PORT " in (rundir / "server.log").read_text()  # it was serving
    assert gone(pid), psutil.Process(pid).cmdline()


def test_an_endpoint_only_serve_job_on_slurm_exits_2(tmp_path: Path) -> None:
    prof = tmp_path / "ep.toml"
    prof.write_text('[[matrix]]\nframeworks = ["openai"]\nmode = "serve"\n'
                    'models = ["m"]\nendpoint = "http://127.0.0.1:8000/v1"\n'
                    'executor = "slurm"\n')
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                         capture_output=True, text=True, env=env_for(tmp_path), timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{prof}: matrix[0].executor:" in res.stderr, res.stderr
    assert 'needs server = "NAME"' in res.stderr
    assert "an endpoint that already serves is not the allocation's" in res.stderr
    assert not (tmp_path / "d.db").exists() or not runs(tmp_path)


@pytest.mark.slow
def test_a_server_whose_runner_dies_is_ended_with_the_step(slurm_env: LocalSlurm,
                                                           tmp_path: Path) -> None:
    # The runner KILLed mid-load (as the OOM killer would): its server, now nobody's
    # child, is no longer in the step's process tree; node.sh ends the runner's session.
    prof = write(tmp_path, 'iterations = 100\nrequest_rate = 1\narrival = "constant"\n'
                 "timeout_s = 120\nserver_scope = \"run\"")
    env = env_for(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        log = tmp_path / "d-runs" / "run-1" / "server.log"
        deadline = time.monotonic() + 90
        while not (log.exists() and "PORT " in log.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        pid, runner, _ = server_ids(log.parent)
        os.kill(runner, signal.SIGKILL)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = runs(tmp_path)
    assert run["status"] == "crashed", (run, out, err)
    assert gone(pid), psutil.Process(pid).cmdline()


def serve_job(tmp_path: Path) -> JobSpec:
    (spec,) = parse(write(tmp_path, "iterations = 2").read_text(), "s.toml", "s",
                    logical_cores=4).jobs
    return spec


SERVER_LIKE = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         process_group=0)
open(sys.argv[1], "w").write(str(child.pid))
{end}
"""


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_node_sh_keeps_the_runner_status_and_ends_what_it_left(tmp_path: Path) -> None:
    # A "runner" that starts a child in a group of its own, then exits 3 (no Slurm):
    # node.sh records 3, and the child, left behind, is ended with the runner's session.
    files = SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")
    pid_file = tmp_path / "child.pid"
    argv = [sys.executable, "-c", SERVER_LIKE.format(end="sys.exit(3)"), str(pid_file)]
    script = node_script(serve_job(tmp_path), argv, files, agent=False)
    assert "setsid " in script
    done = subprocess.run(["bash", "-c", script], env={**os.environ, "SLURM_NODEID": "0"},
                          check=False, timeout=30)
    assert done.returncode == 3
    assert (tmp_path / "runner-exit").read_text() == "3\n"
    assert gone(int(pid_file.read_text()))


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_node_sh_ends_the_runner_s_session_when_signalled(tmp_path: Path) -> None:
    # TERM to node.sh alone (as Slurm's process tracking by group would send it): the
    # runner and the child in its own group are both ended within the grace.
    files = SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")
    pid_file = tmp_path / "child.pid"
    argv = [sys.executable, "-c", SERVER_LIKE.format(end="time.sleep(60)"), str(pid_file)]
    script = node_script(serve_job(tmp_path), argv, files, agent=False)
    proc = subprocess.Popen(["bash", "-c", script], env={**os.environ, "SLURM_NODEID": "0"})
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # the runner's own status
    assert time.monotonic() - t0 < GRACE_S + 2
    assert gone(child)


def test_other_jobs_run_their_runner_as_before(tmp_path: Path) -> None:
    files = SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")
    prof = PROFILE.split("[[matrix]]")[0].split("[defaults]")[0] + (
        '[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
        'devices = ["cpu:1"]\nexecutor = "slurm"\n')
    (spec,) = parse(prof.format(python=sys.executable, fake=FAKE), "t.toml", "t",
                    logical_cores=4).jobs
    script = node_script(spec, ["python", "runner.py", "spec.json"], files, agent=False)
    assert "setsid" not in script and "python runner.py spec.json\nstatus=$?" in script
