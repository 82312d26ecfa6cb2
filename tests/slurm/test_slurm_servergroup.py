"""Issue 41 items 5 and 7 on Slurm: the runs of one configuration group
(``server_scope = "group"``, the default) share one server in one allocation: one batch
job starts tests/programs/fake_openai.py once on the allocated node, each run's client
is a step of that job, the cold start is the first run's, and the job is gone after the
group. A group's job cancelled outside dltop fails the run it was serving, saying so, and
the next run of the group starts a fresh one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.jobs.executors.local import LocalExecutor
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_group import server_script, shared_host, step_executor
from dltop.jobs.executors.slurm_run import SLURM_BATCH, SlurmStepExecutor
from dltop.jobs.servergroup import group_key
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse

from .cluster import NODE, LocalSlurm
from .test_slurm_runs import env_for, runs
from .test_slurm_serve import FAKE, gone, stored

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
server = "fake"
timeout_s = 120
[[matrix]]
models = ["steady"]
{entry}
[slurm]
setup = ["export CUDA_VISIBLE_DEVICES=3"]
"""


HEARTBEAT_LOST_S = 20.0
"""The host's limit this file's engines set (runners/child/openai_server.py's
``DLTOP_SERVER_HEARTBEAT_LOST_S``; 60 s unset)."""


def start(tmp_path: Path, entry: str) -> subprocess.Popen[str]:
    prof = tmp_path / "group.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE, entry=entry))
    return subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env_for(tmp_path),
                                 "DLTOP_SERVER_HEARTBEAT_LOST_S": str(HEARTBEAT_LOST_S)})


def serving(tmp_path: Path, proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Run 1's row once its group's server listens and its step is under way."""
    log = tmp_path / "d-runs" / "run-1" / "server.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "PORT " in log.read_text()) \
            or not (got := runs(tmp_path)) or not got[0]["slurm_job_id"]:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return got[0]


def starts(log: Path) -> list[int]:
    return [int(m) for m in re.findall(r"^PID (\d+)", log.read_text(), re.M)]


def job_state(slurm: LocalSlurm, job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                         text=True, env=slurm.env, check=False).stdout
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else "(forgotten)"


@pytest.mark.slow
def test_a_group_shares_one_server_in_one_allocation(slurm_env: LocalSlurm,
                                                      tmp_path: Path) -> None:
    proc = start(tmp_path, "iterations = 6\nconcurrency = [1, 2]")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    first, second = runs(tmp_path)
    assert first["status"] == second["status"] == "ok", (first, second)
    # one allocation: both runs are steps of the group's job, on its node
    assert first["slurm_job_id"] == second["slurm_job_id"]
    assert first["slurm_nodes"] == second["slurm_nodes"] == NODE
    dirs = [tmp_path / "d-runs" / f"run-{r['id']}" for r in (first, second)]
    (pid,) = starts(dirs[0] / "server.log")  # one server start, in run 1's folder
    assert starts(dirs[1] / "server.log") == []
    assert (dirs[1] / "server.log").read_text().startswith(
        f"server shared with run {first['id']}, started before it")
    # the cold start is the first run's; the second says it shared it
    assert 0.4 <= first["server_cold_start_s"] < 30
    assert second["server_cold_start_s"] is None
    # the server ran in the allocation, on its devices (the setup line's stand-in)
    assert (dirs[0] / "server.log").read_text().splitlines()[0] == "DEVICES=3"
    script = (dirs[0] / "server" / "batch.sh").read_text()
    assert "export CUDA_VISIBLE_DEVICES=3" in script and "setsid " in script
    for rundir, run in zip(dirs, (first, second), strict=True):
        ((n,),) = stored(tmp_path, "select count(*) from serve_requests where run_id = ? "
                         "and error is null and not warmup", run["id"])
        assert n == 6
        assert f"SLURM_JOB_NODELIST={NODE}" in (rundir / "job-env").read_text()
    # stopped after the group: the job left Slurm's live states, the server is gone
    assert job_state(slurm_env, first["slurm_job_id"]) in ("CANCELLED", "COMPLETED",
                                                           "(forgotten)")
    assert gone(pid), psutil.Process(pid).cmdline()


@pytest.mark.slow
def test_a_group_job_cancelled_outside_fails_its_run_and_the_next_starts_anew(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    # the first run's load is slow (1 request/s); its group's job is scancelled
    # under it: that run is not ok and says why; the second gets a server of its own
    proc = start(tmp_path, 'iterations = 20\nrequest_rate = [1, 50]\narrival = "constant"')
    try:
        first = serving(tmp_path, proc)
        time.sleep(3)  # the first run's load is under way
        subprocess.run(["scancel", first["slurm_job_id"]], env=slurm_env.env, check=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    first, second = runs(tmp_path)
    assert first["status"] in ("crashed", "cancelled"), (first, out, err)
    assert f"the group's Slurm job {first['slurm_job_id']} ended" in (
        first["error_message"] or ""), first
    assert second["status"] == "ok", (second, out, err)
    assert second["slurm_job_id"] != first["slurm_job_id"]
    assert second["server_cold_start_s"] is not None


@pytest.mark.slow
def test_a_dead_engine_s_group_job_stops_its_server_when_the_heartbeat_stops(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    # The engine KILLed mid-load: nobody scancels the group's job; its host sees the
    # heartbeat file stop changing (20 s here, 60 s by default) and stops the server, which
    # ends the job.
    proc = start(tmp_path, 'iterations = 200\nrequest_rate = 1\narrival = "constant"')
    try:
        run = serving(tmp_path, proc)
        log = tmp_path / "d-runs" / "run-1" / "server.log"
        (pid,) = starts(log)
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        while not gone(pid):
            assert time.monotonic() - killed < HEARTBEAT_LOST_S + 30, "server outlived"
            time.sleep(1)
        assert time.monotonic() - killed > HEARTBEAT_LOST_S - 10  # not before
        deadline = time.monotonic() + 60
        while job_state(slurm_env, run["slurm_job_id"]) in ("RUNNING", "COMPLETING"):
            assert time.monotonic() < deadline
            time.sleep(1)
        assert "shared server stopped" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        # the dead engine's step: its srun, in a session of its own here
        for row in runs(tmp_path):
            if row["pid"] and not gone(row["pid"]):
                os.killpg(row["pid"], signal.SIGKILL)


def jobs(entry: str, slurm: str = "") -> list[JobSpec]:
    text = PROFILE.format(python=sys.executable, fake=FAKE, entry=entry) + slurm
    return list(parse(text, "g.toml", "g", logical_cores=4).jobs)


def test_which_runs_share_a_slurm_job() -> None:
    steady, faster = jobs("concurrency = [1, 2]")
    key, launch = shared_host(steady, 1, SLURM_BATCH, ())
    assert key is not None and launch is not None
    assert shared_host(faster, 2, SLURM_BATCH, ())[0] == key  # one group
    # another [slurm] table is another allocation: another group
    (other,) = jobs("", 'partition = "other"\n')
    assert shared_host(other, 3, SLURM_BATCH, ())[0] != key
    # per run: server_scope = "run", in a pyxis image (in a batch job or an salloc)
    (per_run,) = jobs('server_scope = "run"')
    assert shared_host(per_run, 4, SLURM_BATCH, ()) == (None, None)
    (pyxis,) = jobs("", 'container = "img.sqsh"\n')
    assert shared_host(pyxis, 5, SlurmStepExecutor("77"), ()) == (None, None)
    # inside an salloc: the group's server is a step of it (same group, another launch)
    in_salloc, launch = shared_host(steady, 5, SlurmStepExecutor("77"), ())
    assert in_salloc == key and launch is not None
    assert shared_host(pyxis, 6, SLURM_BATCH, ()) == (None, None)
    # the local executor: the engine's own host (launch None), keyed by the GPUs
    assert shared_host(steady, 7, LocalExecutor(), (0,)) == (group_key(steady, (0,)), None)


def test_a_run_of_a_group_job_is_a_step_of_it() -> None:
    env: dict[str, str] = {}
    assert step_executor(None, SLURM_BATCH, env) is SLURM_BATCH and env == {}
    got = step_executor({"slurm_job": "42", "slurm_nodes": "n1"}, SLURM_BATCH, env)
    assert isinstance(got, SlurmStepExecutor) and got.name == "slurm-step"
    assert env == {"SLURM_JOB_ID": "42", "SLURM_JOBID": "42", "SLURM_JOB_NODELIST": "n1"}
    # pinned to the server's node: in a multi-node salloc srun could pick another
    assert got._node == "n1"


def test_the_group_job_script_runs_setup_then_the_host_in_a_swept_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (job,) = jobs("")
    files = SlurmFiles(tmp_path / "server", tmp_path / "spec.json", tmp_path / "server.log")
    monkeypatch.delenv("DLTOP_SERVER_HEARTBEAT_LOST_S", raising=False)
    script = server_script(job, 9, ["py", "openai_server.py", "spec.json", "server.log"],
                           files, tmp_path / "server" / "alive")
    assert "HEARTBEAT_LOST" not in script  # the host's own 60 s
    monkeypatch.setenv("DLTOP_SERVER_HEARTBEAT_LOST_S", "25")
    assert "export DLTOP_SERVER_HEARTBEAT_LOST_S=25\n" in server_script(
        job, 9, ["py"], files, tmp_path / "server" / "alive")
    lines = script.splitlines()
    setup = lines.index("export CUDA_VISIBLE_DEVICES=3")
    host = next(i for i, line in enumerate(lines)
                if "setsid py openai_server.py spec.json server.log" in line)
    assert setup < host
    assert f"exec 3>>{files.events_path}" in lines
    assert f"export DLTOP_SERVER_HEARTBEAT={tmp_path / 'server' / 'alive'}" in lines
    assert "trap 'DLTOP_SIGNALLED=1; dltop_end_session' TERM INT" in script
