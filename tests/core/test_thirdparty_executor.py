"""A third executor touches nothing outside jobs/executors/: a test-only one
(tests/core/exec_thirdparty.py), registered through ``DLTOP_EXECUTORS`` alone, runs
command jobs end to end with a real ``dltop run``, and resume finds it by the name
its runs store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tests.core.exec_thirdparty import NAME, REAPED_ENV, ROUTE, ThirdPartyExecutor
from tests.dltop_env import DltopEnv

import dltop
from dltop.catalog import EXECUTORS_ENV
from dltop.jobs.executors.pick import of_stored_run
from dltop.store.queue import RunProcess

ROOT = Path(__file__).resolve().parents[2]
STEPS = ROOT / "tests" / "programs" / "steps.py"
ENTRY = f"{NAME}=tests.core.exec_thirdparty:ThirdPartyExecutor"
PROFILE = f"""
name = "third"
[defaults]
executor = "{NAME}"
iterations = 3
warmup = 1
repeats = 2
command = ["{sys.executable}", "{STEPS}", "{{total}}", "0.01"]
[[matrix]]
frameworks = ["command"]
models = ["steps"]
batch_sizes = [8]
devices = ["cpu:1"]
"""


def _env(tmp_path: Path) -> DltopEnv:
    env = DltopEnv(tmp_path, STEPS, PROFILE)
    # The registration, and the one change: dltop imports the class by this entry.
    env.env[EXECUTORS_ENV] = ENTRY
    env.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
def test_a_registered_executor_runs_command_jobs_end_to_end(tmp_path: Path) -> None:
    env = _env(tmp_path)
    res = env.dltop("run", str(env.profile), "--headless")
    assert res.returncode == 0, res.stderr
    runs = env.rows("select r.id, r.status, r.executor, r.pid, r.log_path, (select count(*) "
                    "from iterations i where i.run_id = r.id) as its from runs r order by r.id")
    assert [(r["status"], r["executor"], r["its"]) for r in runs] == [("ok", NAME, 4)] * 2
    for r in runs:  # the runner came by the executor's own route: its wrapper's pid is the run's
        assert (Path(r["log_path"]).parent / ROUTE).read_text().strip() == str(r["pid"])


@pytest.mark.slow
def test_resume_reaps_its_run_by_the_name_the_run_stored(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.profile.write_text(PROFILE.replace("iterations = 3", "iterations = 600")
                           .replace("repeats = 2", "repeats = 1"))
    go = tmp_path / "go"  # the run holds in its 13th step until this exists (steps.py)
    engine = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(env.profile),
                               "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env={**env.env, "STEPS_HOLD": str(go)})
    assert engine.stdout is not None
    for line in engine.stdout:  # the run is under way: a few steps reported
        event = json.loads(line)
        if event["event"] == "iteration" and event["index"] > 3:
            break
    # killed between two events: a runner ends at its next event once its engine is gone
    deadline = time.monotonic() + 60
    while not Path(f"{go}.held").exists():
        assert time.monotonic() < deadline, "the run never held"
        time.sleep(0.05)
    engine.kill()
    engine.wait()
    (lost,) = env.rows("select id, pid, executor from runs")
    assert lost["executor"] == NAME
    assert psutil.Process(lost["pid"]).status() != psutil.STATUS_ZOMBIE
    env.profile.write_text(PROFILE)  # unread by resume: the queue is stored
    env.env[REAPED_ENV] = str(tmp_path / "reaped")
    res = env.dltop("run", "--resume", "--headless")
    assert res.returncode == 0, res.stderr
    # its executor, found by the stored name, reaped it: the runner's group is killed
    assert (tmp_path / "reaped").read_text().split() == [str(lost["id"])]
    assert re.search(r"\d+ orphaned process(es)? killed", res.stderr), res.stderr
    runs = env.rows("select status, error_kind, executor from runs order by id")
    assert runs == [{"status": "crashed", "error_kind": "engine_lost", "executor": NAME},
                    {"status": "ok", "error_kind": None, "executor": NAME}]


def test_without_the_registration_the_name_is_refused(tmp_path: Path) -> None:
    env = _env(tmp_path)
    del env.env[EXECUTORS_ENV]
    res = env.dltop("run", str(env.profile), "--headless")
    assert res.returncode == 2 and "executor" in res.stderr and NAME in res.stderr, res.stderr


def test_resume_finds_a_stored_run_of_it_by_its_name() -> None:
    row = RunProcess(1, 1, pid=5, pgid=5, proc_start_time=1.0, executor=NAME)
    assert isinstance(of_stored_run(row, {EXECUTORS_ENV: ENTRY}), ThirdPartyExecutor)


def test_registering_it_touched_no_dltop_file() -> None:
    # dltop knows it only from the environment: no file of the package names it.
    src = Path(dltop.__file__).parent
    named = [str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()
             and p.suffix in (".py", ".toml", ".tcss") and
             ("exec_thirdparty" in (text := p.read_text()) or f'"{NAME}"' in text)]
    assert named == []
