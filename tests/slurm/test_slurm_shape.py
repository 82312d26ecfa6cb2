"""The job's shape, environment and setup in the generated sbatch line and scripts
(no cluster: the scripts run under bash with a stand-in ``srun`` where they must run).

No container runtime exists here (neither pyxis nor Apptainer): their lines are
checked as text and by ``bash -n`` only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dltop.jobs.executors.slurm_query import (
    parse_cores_per_gpu,
    parse_failed_nodes,
    read_job_env,
    read_setup_failure,
)
from dltop.jobs.executors.slurm_script import batch_script, node_script, sbatch_argv

from .test_slurm_scripts import ARGV, files, job


def test_sbatch_exports_all_and_a_timed_run_has_its_node_alone(tmp_path: Path) -> None:
    argv = sbatch_argv(job(), 1, files(tmp_path))
    # explicit: a site's SBATCH_EXPORT=NONE would otherwise drop dltop's thread variables
    assert "--export=ALL" in argv
    assert "--exclusive" in argv and "--mem=0" in argv  # the node, all its memory
    shared = sbatch_argv(job(slurm='[slurm]\nexclusive = false\nmem = "8G"'), 1,
                         files(tmp_path))
    assert "--exclusive" not in shared and "--mem=8G" in shared
    assert "--mem" not in " ".join(sbatch_argv(job(slurm="[slurm]\nexclusive = false"), 1,
                                               files(tmp_path)))
    text = batch_script(job(), 1, files(tmp_path))
    assert " --export=ALL " in text.splitlines()[-1]  # srun too (SLURM_EXPORT_ENV=NONE)


def test_gpu_jobs_get_the_nodes_cores_per_gpu(tmp_path: Path) -> None:
    sinfo = "64 gpu:4\n48 gpu:a100:4(S:0-1),tmpdisk:100\n16 (null)\n"
    assert parse_cores_per_gpu(sinfo) == 12  # the fewest over the partition's nodes
    assert parse_cores_per_gpu("16 (null)\n") is None
    argv = sbatch_argv(job(device="gpu:2"), 1, files(tmp_path), cpus_per_gpu=12)
    assert "--gpus-per-node=2" in argv and "--cpus-per-task=24" in argv
    # the [slurm] key wins; without either Slurm's default stays
    keyed = sbatch_argv(job(device="gpu:2", slurm="[slurm]\ncpus_per_task = 6"), 1,
                        files(tmp_path), cpus_per_gpu=12)
    assert "--cpus-per-task=6" in keyed
    assert "--cpus-per-task" not in " ".join(sbatch_argv(job(device="gpu:2"), 1,
                                                         files(tmp_path)))
    step = batch_script(job(device="gpu:2"), 1, files(tmp_path), cpus_per_gpu=12)
    assert "--cpus-per-task=24 --gpus-per-node=2" in step  # the step asks for them too


def test_srun_args_and_containers_wrap_the_runner(tmp_path: Path) -> None:
    pyxis = job(device="gpu:1", slurm='[slurm]\nsrun_args = ["--cpu-bind=cores"]\n'
                                      'container = "nvcr.io#nvidia/pytorch:24.01-py3"')
    text = batch_script(pyxis, 1, files(tmp_path))
    last = text.splitlines()[-1]
    assert "--container-image=nvcr.io#nvidia/pytorch:24.01-py3" in last
    assert f"--container-mounts={tmp_path}" in last and last.index("--cpu-bind=cores") > 0
    assert "apptainer" not in node_script(pyxis, ARGV, files(tmp_path))
    app = job(device="gpu:1", slurm='[slurm]\ncontainer = "/img/torch.sif"\n'
                                    'container_runtime = "apptainer"')
    node = node_script(app, ARGV, files(tmp_path))
    assert ("apptainer exec --nv --bind /runs/run-7 /img/torch.sif " + " ".join(ARGV)) in node
    # the agent stays outside the image
    assert "apptainer" not in next(x for x in node.splitlines() if "-m dltop agent" in x)
    assert "--container-image" not in batch_script(app, 1, files(tmp_path))
    for script in (text, node):
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def _fake_srun(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/sh\necho "srun ran" > "$(dirname "$0")/ran"\n')
    (bindir / "srun").chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def test_a_failing_setup_line_is_reported_with_its_line(tmp_path: Path) -> None:
    setup = ["export A=1", "module load cuda/12", "echo never"]
    j = job(slurm=f"[slurm]\nsetup = {setup!r}".replace("'", '"'))
    f = files(tmp_path)
    (tmp_path / "batch.sh").write_text(batch_script(j, 1, f))
    env = _fake_srun(tmp_path)
    done = subprocess.run(["bash", str(tmp_path / "batch.sh")], env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 127, done.stderr  # module: command not found
    assert not (tmp_path / "bin" / "ran").exists()  # the step never started
    assert read_setup_failure(f, setup) == "setup line 2 failed (exit 127): module load cuda/12"
    # setup that succeeds goes on to the step and leaves no report
    (tmp_path / "setup-failed").unlink()
    ok = job(slurm='[slurm]\nsetup = ["export A=1", "true"]')
    (tmp_path / "batch.sh").unlink()
    (tmp_path / "batch.sh").write_text(batch_script(ok, 1, f))
    subprocess.run(["bash", str(tmp_path / "batch.sh")], env=env, check=True)
    assert (tmp_path / "bin" / "ran").exists()
    assert read_setup_failure(f, ok.slurm.setup) is None  # type: ignore[union-attr]


def test_the_first_node_reports_the_variables_its_runner_has(tmp_path: Path) -> None:
    f = files(tmp_path)
    argv = [sys.executable, "-c", "pass"]
    script = node_script(job(device="cpu:2"), argv, f, agent=False)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_THREADS")}
    env.update(SLURM_NODEID="0", OMP_NUM_THREADS="2", MKL_NUM_THREADS="")
    subprocess.run(["bash", "-c", script], env=env, check=True)
    got = read_job_env(f)
    assert got is not None
    assert got["OMP_NUM_THREADS"] == "2" and got["MKL_NUM_THREADS"] == ""  # set, empty
    assert "OPENBLAS_NUM_THREADS" not in got  # not set at all: absent, not invented
    f.job_env_path.unlink()
    subprocess.run(["bash", "-c", script], env={**env, "SLURM_NODEID": "1"}, check=True)
    assert read_job_env(f) is None  # only the first node reports


def test_a_node_failure_names_the_nodes_sinfo_shows_down() -> None:
    out = ("gpu01|allocated|none\ngpu02|down*|Not responding\ngpu02|down*|Not responding\n"
           "gpu03|drained|bad gpu\n")
    assert parse_failed_nodes(out) == ["gpu02 (down*: Not responding)",
                                       "gpu03 (drained: bad gpu)"]
    assert parse_failed_nodes("gpu01|idle|none\n") == []
