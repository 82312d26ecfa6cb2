"""Issue 41 items 5 and 7 on Slurm: the runs of one configuration group
(``server_scope = "group"``, the default) share one server in one allocation: one batch
job starts tests/programs/fake_openai.py once on the allocated node, each run's client
is a step of that job, the cold start is the first run's, and the job is gone after the
group. A group's job cancelled outside dltop fails the run it was serving, saying so, and
the next run of the group starts a fresh one."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .cluster import NODE, LocalSlurm
from .test_slurm_runs import env_for, runs
from .test_slurm_serve import FAKE, gone, stored

pytestmark = pytest.mark.slow

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


def start(tmp_path: Path, entry: str) -> subprocess.Popen[str]:
    prof = tmp_path / "group.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE, entry=entry))
    return subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for(tmp_path))


def starts(log: Path) -> list[int]:
    return [int(m) for m in re.findall(r"^PID (\d+)", log.read_text(), re.M)]


def job_state(slurm: LocalSlurm, job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                         text=True, env=slurm.env, check=False).stdout
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else "(forgotten)"


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


def test_a_group_job_cancelled_outside_fails_its_run_and_the_next_starts_anew(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    # the first run's load is slow (1 request/s); its group's job is scancelled
    # under it: that run is not ok and says why; the second gets a server of its own
    proc = start(tmp_path, 'iterations = 20\nrequest_rate = [1, 50]\narrival = "constant"')
    try:
        log = tmp_path / "d-runs" / "run-1" / "server.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "PORT " in log.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        time.sleep(3)  # the first run's load is under way
        (first,) = runs(tmp_path)
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
