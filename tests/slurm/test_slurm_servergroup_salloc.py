"""Issue 41 item 5 inside an ``salloc``: the runs of one configuration group share one
server, a step of the allocation dltop runs in (``srun --overlap``), each run a step of
the same allocation on the server's node; the cold start is the first run's, no step
waits in a queue, and neither a step nor the server is left once dltop is done. A
server that does not start fails the group's runs with one start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .cluster import NODE, LocalSlurm
from .test_slurm_runs import env_for, runs
from .test_slurm_serve import FAKE, gone
from .test_slurm_servergroup import HEARTBEAT_LOST_S, PROFILE, starts
from .test_slurm_servergroup_life import DIES


def in_salloc(tmp_path: Path, prof: Path, salloc: list[str]) -> tuple[int, str, str]:
    """``dltop run`` in an ``salloc``; then, still inside it, the allocation's steps
    (``steps``: none may be left once dltop has ended)."""
    inner = (f"{sys.executable} -m dltop run {prof} --headless; rc=$?; "
             f"squeue -h -s -j $SLURM_JOB_ID -o %i > {tmp_path / 'steps'}; exit $rc")
    res = subprocess.run(["salloc", *salloc, "--job-name=outer", "/bin/bash", "-c", inner],
                         capture_output=True, text=True, timeout=240,
                         env={**env_for(tmp_path),
                              "DLTOP_SERVER_HEARTBEAT_LOST_S": str(HEARTBEAT_LOST_S)})
    outer = res.stderr.split("Granted job allocation ", 1)[1].split()[0]
    return res.returncode, outer, res.stdout + res.stderr


@pytest.mark.slow
def test_inside_an_salloc_a_group_shares_one_server_step(slurm_env: LocalSlurm,
                                                         tmp_path: Path) -> None:
    prof = tmp_path / "group.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE,
                                   entry="iterations = 4\nconcurrency = [1, 2, 4]"))
    # two nodes: the runs' steps must land on the server's (pinned, --nodelist)
    rc, outer, out = in_salloc(tmp_path, prof, ["--partition=two", "--nodes=2"])
    assert rc == 0, out
    got = runs(tmp_path)
    assert [r["status"] for r in got] == ["ok"] * 3, (got, out)
    dirs = [tmp_path / "d-runs" / f"run-{r['id']}" for r in got]
    (pid,) = starts(dirs[0] / "server.log")  # one server start, in run 1's folder
    assert all(starts(d / "server.log") == [] for d in dirs[1:])
    assert 0.4 <= got[0]["server_cold_start_s"] < 30
    assert [r["server_cold_start_s"] for r in got[1:]] == [None, None]
    for run, rundir in zip(got, dirs, strict=True):
        # steps of the allocation dltop runs in, on the server's node, none queued
        assert run["slurm_job_id"] == outer and run["slurm_nodes"] == NODE, run
        assert run["queue_s"] == 0.0, run
        assert f"--nodelist={NODE}" in (rundir / "batch.sh").read_text()
    server = (dirs[0] / "server" / "batch.sh").read_text()
    assert "--overlap" in server and "export CUDA_VISIBLE_DEVICES=3" in server
    assert (dirs[0] / "server.log").read_text().splitlines()[0] == "DEVICES=3"
    assert not (dirs[0] / "server" / "step").exists()  # the record of its srun: ended
    # nothing left: no step in the allocation after dltop, no server process
    assert (tmp_path / "steps").read_text() == "", (tmp_path / "steps").read_text()
    assert gone(pid)


@pytest.mark.slow
def test_inside_an_salloc_a_server_that_does_not_start_fails_the_group_once(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    prof = tmp_path / "dies.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE,
                                   entry="concurrency = [1, 2, 4]").replace(
        'server = "fake"', 'server = "dies"') + DIES[0])
    rc, _, out = in_salloc(tmp_path, prof, ["--nodes=1"])
    assert rc == 1, out
    first, *later = runs(tmp_path)
    assert first["status"] == "setup_failed" and DIES[1] in first["error_message"], first
    assert "cannot load the model" in first["log_tail"], first
    for run in later:  # none starts a server or a step of its own
        assert run["status"] == "setup_failed", run
        assert run["error_message"].startswith(
            f"the group's server failed to start for run {first['id']}: "), run
        assert not (tmp_path / "d-runs" / f"run-{run['id']}" / "server").exists()
        assert not (tmp_path / "d-runs" / f"run-{run['id']}" / "batch.sh").exists()
    assert (tmp_path / "steps").read_text() == ""


@pytest.mark.slow
def test_inside_an_salloc_resume_ends_the_server_step_a_killed_engine_left(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    # The server step is no run's: its srun was recorded nowhere, and it lived on till
    # its heartbeat ran out (60 s; 600 s here, so only the resume can have ended it).
    prof = tmp_path / "group.toml"
    prof.write_text(PROFILE.format(python=sys.executable, fake=FAKE,
                                   entry="iterations = 300\nconcurrency = [1, 2]"))
    pid_file, out = tmp_path / "engine.pid", tmp_path / "out"
    dl = f"{sys.executable} -m dltop run"
    inner = (f"{dl} {prof} --headless & echo $! > {pid_file}; wait $!; "
             f"squeue -h -s -j $SLURM_JOB_ID -o %j > {tmp_path / 'left'}; "
             f"{dl} --resume --headless; rc=$?; "
             f"squeue -h -s -j $SLURM_JOB_ID -o %i > {tmp_path / 'steps'}; exit $rc")
    with out.open("w") as log:
        salloc = subprocess.Popen(
            ["salloc", "--nodes=1", "--job-name=outer", "/bin/bash", "-c", inner],
            stdout=log, stderr=subprocess.STDOUT, text=True,
            env={**env_for(tmp_path), "DLTOP_SERVER_HEARTBEAT_LOST_S": "600"})
        try:
            server_log = tmp_path / "d-runs" / "run-1" / "server.log"
            deadline = time.monotonic() + 120
            while not (server_log.exists() and "PORT " in server_log.read_text()
                       and pid_file.exists() and any(r["pid"] for r in runs(tmp_path))):
                assert time.monotonic() < deadline and salloc.poll() is None, out.read_text()
                time.sleep(0.1)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # as the OOM killer would
            assert salloc.wait(timeout=240) == 0, out.read_text()
        finally:
            if salloc.poll() is None:
                salloc.kill()
    text = out.read_text()
    # the killed engine's server step outlived it; the resume ended it: none is left
    assert "dltop-server-1" in (tmp_path / "left").read_text(), text
    assert (tmp_path / "steps").read_text() == "", text
    (old,) = starts(server_log)
    assert gone(old), text
    assert not (tmp_path / "d-runs" / "run-1" / "server" / "step").exists()
    assert re.search(r"\d+ orphaned process(es)? killed", text), text
    got = runs(tmp_path)
    assert [r["status"] for r in got].count("ok") == 2, got
    assert all(r["status"] in ("ok", "crashed") for r in got), got
