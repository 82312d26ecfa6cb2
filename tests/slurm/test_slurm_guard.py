"""Setup is setup, and a step is the shape asked (issue 38 items 2 and 4), without a
cluster: the generated scripts run under bash with a stand-in ``srun`` and Slurm's
step variables set by hand; what they leave is read back as the engine reads it.
The same on the real cluster: test_slurm_runs.py (a missing ``source`` file, an outer
``salloc -n2``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from dltop.catalog import RunStatus
from dltop.jobs.eventreader import EventReader, classify_outcome
from dltop.jobs.executors.slurm_guard import STEP_UNSET_VARS, sbatch_env
from dltop.jobs.executors.slurm_query import read_start_failure
from dltop.jobs.executors.slurm_script import batch_script, node_script
from dltop.profiles.slurmopts import TABLES

from .test_slurm_scripts import files, job


def _stand_in_srun(tmp_path: Path) -> dict[str, str]:
    """PATH with an ``srun`` that records its arguments and environment, then runs nothing."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/argv"\n'
                                 'env > "$(dirname "$0")/env"\n')
    (bindir / "srun").chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def _run_batch(tmp_path: Path, setup: list[str], env: dict[str, str]) -> int:
    j = job(slurm=f"[slurm]\nsetup = {setup!r}".replace("'", '"'))
    (tmp_path / "batch.sh").write_text(batch_script(j, 1, files(tmp_path)))
    return subprocess.run(["bash", str(tmp_path / "batch.sh")], env=env, capture_output=True,
                          check=False).returncode


def test_a_missing_source_file_is_setup_failed_naming_the_file(tmp_path: Path) -> None:
    env = {**_stand_in_srun(tmp_path), "VENV": str(tmp_path / "missing")}
    setup = ["export A=1", "source $VENV/bin/activate"]
    assert _run_batch(tmp_path, setup, env) == 1
    assert not (tmp_path / "bin" / "argv").exists()  # the step never started
    j = job(slurm=f"[slurm]\nsetup = {setup!r}".replace("'", '"'))
    assert read_start_failure(files(tmp_path), j, 1) == (
        f"setup line 2 failed: source $VENV/bin/activate: no such file "
        f"{tmp_path}/missing/bin/activate")


def test_a_source_line_bash_ends_without_the_trap_is_still_setup(tmp_path: Path) -> None:
    # no slash: bash looks it up on PATH, so no explicit check; it still ends the script
    env = _stand_in_srun(tmp_path)
    setup = ["source no-such-activate-script"]
    assert _run_batch(tmp_path, setup, env) == 1
    assert not (tmp_path / "bin" / "argv").exists()
    j = job(slurm='[slurm]\nsetup = ["source no-such-activate-script"]')
    why = read_start_failure(files(tmp_path), j, 1)
    assert why is not None and why.startswith("the setup lines ended the job (exit 1) before")


def test_an_existing_source_file_is_sourced(tmp_path: Path) -> None:
    env = _stand_in_srun(tmp_path)
    (tmp_path / "activate").write_text("export DLTOP_TEST_SOURCED=yes\n")
    assert _run_batch(tmp_path, [f". {tmp_path}/activate"], env) == 0
    assert "DLTOP_TEST_SOURCED=yes" in (tmp_path / "bin" / "env").read_text()
    assert (tmp_path / "setup-done").exists() and not (tmp_path / "setup-failed").exists()


def test_an_outer_allocation_s_variables_never_reach_the_step_s_srun(tmp_path: Path) -> None:
    # what salloc -N1 -n2 --gpus=1 --mem-per-cpu=1G gives the shell dltop runs in
    outer = {"SLURM_JOB_ID": "42", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2",
             "SLURM_NTASKS_PER_NODE": "2", "SRUN_CPUS_PER_TASK": "4", "SLURM_GPUS": "1",
             "SLURM_MEM_PER_CPU": "1024", "SLURM_DISTRIBUTION": "cyclic"}
    env = {**_stand_in_srun(tmp_path), **outer}
    assert _run_batch(tmp_path, ["true"], env) == 0
    seen = dict(line.split("=", 1) for line in
                (tmp_path / "bin" / "env").read_text().splitlines() if "=" in line)
    assert seen["SLURM_JOB_ID"] == "42"  # still a step of the allocation
    assert not set(outer) - {"SLURM_JOB_ID"} & set(seen)
    assert set(outer) - {"SLURM_JOB_ID"} <= set(STEP_UNSET_VARS)
    argv = (tmp_path / "bin" / "argv").read_text().split()
    assert {"--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--gres=none", "--mem=0"} <= \
        set(argv)


def _node(tmp_path: Path, slurm: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    ran = tmp_path / "runner-ran"
    argv = [sys.executable, "-c", f"open({str(ran)!r}, 'w').close()", str(tmp_path / "s.json")]
    script = node_script(job(slurm=slurm), argv, files(tmp_path), agent=False)
    return subprocess.run(["bash", "-c", script], env={**os.environ, **env},
                          capture_output=True, text=True, check=False)


def test_a_step_of_another_shape_starts_no_runner(tmp_path: Path) -> None:
    step = {"SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NUM_NODES": "1"}
    done = _node(tmp_path, "", step)
    assert done.returncode == 3 and "not 1 on 1: no runner started" in done.stderr
    assert not (tmp_path / "runner-ran").exists()
    assert read_start_failure(files(tmp_path), job(), 3) == (
        "the step had 2 task(s) on 1 node(s), not 1 on 1 as asked: no runner started")
    # the second task says nothing more; the right shape runs the runner
    (tmp_path / "step-shape").unlink()
    assert _node(tmp_path, "", {**step, "SLURM_PROCID": "1"}).returncode == 3
    assert not (tmp_path / "step-shape").exists()
    done = _node(tmp_path, "", {**step, "SLURM_STEP_NUM_TASKS": "1"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runner-ran").exists() and (tmp_path / "step-started").exists()


def test_an_apptainer_image_that_does_not_start_is_setup_failed(tmp_path: Path) -> None:
    # no apptainer on PATH at all: the image cannot start
    bindir = tmp_path / "bin"
    bindir.mkdir()
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SLURMD_NODENAME": "n7", "SLURM_NODEID": "0"}
    slurm = '[slurm]\ncontainer = "/img/torch.sif"\ncontainer_runtime = "apptainer"'
    done = _node(tmp_path, slurm, env)
    assert done.returncode == 127 and not (tmp_path / "runner-ran").exists()
    assert read_start_failure(files(tmp_path), job(slurm=slurm), 127) == (
        "the container /img/torch.sif did not start on n7 (apptainer exec exit 127; "
        "see the job's log)")
    # an image that starts runs the runner inside it
    (bindir / "apptainer").write_text('#!/bin/sh\nshift 4\nexec "$@"\n')
    (bindir / "apptainer").chmod(0o755)
    (tmp_path / "container-failed").unlink()
    assert _node(tmp_path, slurm, env).returncode == 0
    assert (tmp_path / "runner-ran").exists()
    assert read_start_failure(files(tmp_path), job(slurm=slurm), 1) is None


def test_a_pyxis_step_that_never_ran_node_sh_is_setup_failed(tmp_path: Path) -> None:
    slurm = '[slurm]\ncontainer = "nvcr.io#nvidia/pytorch:24.01-py3"'
    # pyxis starts the image before node.sh: a failed import leaves no step-started
    assert read_start_failure(files(tmp_path), job(slurm=slurm), 1) == (
        "the container nvcr.io#nvidia/pytorch:24.01-py3 did not start (pyxis: srun exit 1; "
        "see the job's log)")
    (tmp_path / "step-started").touch()
    assert read_start_failure(files(tmp_path), job(slurm=slurm), 1) is None  # the runner's


def _hello(pid: int) -> bytes:
    return (f'{{"v": 1, "event": "hello", "framework": "torch", "framework_version": "2",'
            f' "device": "cpu", "threads": 1, "pid": {pid}}}\n').encode()


def test_two_runners_in_one_run_fail_it_with_the_reason() -> None:
    done = b'{"v": 1, "event": "iter", "index": 0, "seconds": 0.1, "samples": 8}\n' \
           b'{"v": 1, "event": "done"}\n'
    one = EventReader(lambda e: None)
    one.feed(_hello(10) + _hello(10) + done)  # one runner saying hello twice is one
    assert classify_outcome(None, 0, one, 60)[0] == RunStatus.OK
    two = EventReader(lambda e: None)
    two.feed(_hello(10) + _hello(11) + done)
    status, _, message = classify_outcome(None, 0, two, 60)
    assert status == RunStatus.CRASHED
    assert message == "two runners reported (pids 10 and 11) where the job asked for one"


def test_the_option_tables_hold_what_the_installed_slurm_offers(tmp_path: Path) -> None:
    """Every long option (and its short form) of ``sbatch --help``/``srun --help``."""
    conf = tmp_path / "slurm.conf"  # the clients read a configuration even for --help
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\n"
                    "PartitionName=p Nodes=n1\n")
    for command in ("sbatch", "srun"):
        text = subprocess.run([command, "--help"], env={**os.environ, "SLURM_CONF": str(conf)},
                              capture_output=True, text=True, check=True).stdout
        found = re.findall(r"(?:^|\s)(?:-([A-Za-z]), )?--([a-z][a-z_-]*)", text, re.M)
        assert len(found) > 80, text
        for short, name in found:
            assert name in TABLES[command], (command, name)
            assert not short or TABLES[command][name].short == short, (command, name)


def test_sbatch_runs_without_the_variables_that_would_reshape_the_job() -> None:
    env = {"SBATCH_ARRAY_INX": "0-999", "SBATCH_GPUS": "2", "SBATCH_PARTITION": "gpu",
           "SBATCH_QOS": "high", "PATH": "/bin"}
    assert sbatch_env(env) == {"SBATCH_PARTITION": "gpu", "SBATCH_QOS": "high", "PATH": "/bin"}
