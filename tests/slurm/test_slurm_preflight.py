"""Preflight of Slurm jobs: the login node's devices do not matter, sbatch does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.jobs.campaign import preflight
from dltop.jobs.executors.slurm_partition import (
    NodeFigures,
    Partitions,
    parse_partitions,
    partition_problem,
)
from dltop.jobs.executors.where import SBATCH_MISSING
from dltop.profiles.jobspec import Profile
from dltop.profiles.loader import parse

from .cluster import LocalSlurm

PROFILE = """
name = "c"
[defaults]
iterations = 3
executor = "{executor}"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [256]
devices = ["gpu:4", "cpus:64"]
"""


def profile(executor: str) -> Profile:
    return parse(PROFILE.format(executor=executor), "c.toml", "c", logical_cores=2)


def test_slurm_jobs_are_checked_against_their_partition_not_the_login_node(
        slurm_env: LocalSlurm) -> None:
    # sbatch is on PATH here (the fixture fails naming the packages otherwise); the
    # partition's nodes answer, not this host's 0 GPUs and 2 CPUs
    plan = preflight([profile("slurm")], gpu_count=0, skip_unavailable=True)
    cpus = os.cpu_count()
    assert plan.problems == (
        "c.toml: devices: gpu:4 needs 4 GPUs on one node; partition debug's nodes have at "
        "most 0 (sinfo)",
        f"c.toml: devices: cpus:64 needs 64 CPUs on one node; partition debug's nodes have "
        f"at most {cpus} (sinfo)")
    assert plan.warnings == ()  # no "more than the 2 CPUs available" for cpus:64 there
    with pytest.raises(UserError, match="gpu:4 needs 4 GPU"):
        preflight([profile("local")], gpu_count=0, skip_unavailable=False)


def test_without_sbatch_slurm_jobs_are_refused_or_recorded_unsatisfiable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError) as info:
        preflight([profile("slurm")], gpu_count=0, skip_unavailable=False)
    assert 'executor = "slurm"' in str(info.value) and "apt-get install" in str(info.value)
    plan = preflight([profile("slurm")], gpu_count=0, skip_unavailable=True)
    assert plan.problems == (SBATCH_MISSING, SBATCH_MISSING)


SIZED = """
name = "sized"
[defaults]
iterations = 3
executor = "slurm"
[slurm]
partition = "two"
{slurm}
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = [{devices}]
nodes = {nodes}
"""


def sized(devices: str, nodes: int = 1, slurm: str = "") -> Profile:
    return parse(SIZED.format(devices=devices, nodes=nodes, slurm=slurm), "s.toml", "s")


def test_a_job_bigger_than_its_partition_s_nodes_is_refused_naming_file_key_and_figure(
        slurm_env: LocalSlurm) -> None:
    """Partition ``two``: a node of every CPU here and a node of one CPU."""
    cpus = os.cpu_count() or 1
    assert preflight([sized('"cpu:1"', nodes=2)], 0, False).problems == (None,)
    assert preflight([sized(f'"cpu:{cpus}"')], 0, False).problems == (None,)
    with pytest.raises(UserError) as info:
        preflight([sized(f'"cpu:{cpus + 1}"')], 0, False)
    assert (f"s.toml: devices: cpu:{cpus + 1} needs {cpus + 1} CPUs on one node; partition "
            f"two's nodes have at most {cpus} (sinfo)") in str(info.value)
    assert "--skip-unavailable" in str(info.value)
    plan = preflight([sized('"cpu:1"', slurm=f"cpus_per_task = {cpus + 1}")], 0, True)
    assert plan.problems == (f"s.toml: slurm.cpus_per_task = {cpus + 1} needs {cpus + 1} "
                             f"CPUs on one node; partition two's nodes have at most {cpus} "
                             "(sinfo)",)
    # both nodes have a CPU, one has two: two nodes of two CPUs are not there
    if cpus >= 2:
        plan = preflight([sized('"cpu:2"', nodes=2)], 0, True)
        assert plan.problems == ("s.toml: nodes = 2 needs 2 nodes of 2 CPUs and 0 GPUs; "
                                 "partition two has 1 such node (sinfo)",)
    plan = preflight([sized('"gpu:1"')], 0, True)
    assert plan.problems == ("s.toml: devices: gpu:1 needs 1 GPUs on one node; partition "
                             "two's nodes have at most 0 (sinfo)",)


@pytest.mark.slow
def test_dltop_run_of_a_job_bigger_than_the_partition_exits_2_storing_nothing(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    cpus = os.cpu_count() or 1
    prof = tmp_path / "s.toml"
    prof.write_text(SIZED.format(devices=f'"cpu:{cpus + 1}"', nodes=1, slurm=""))
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--headless"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DLTOP_DB": str(db)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{prof}: devices: cpu:{cpus + 1} needs {cpus + 1} CPUs on one node; partition " \
        f"two's nodes have at most {cpus} (sinfo)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not db.exists() or not sqlite_rows(db)


def sqlite_rows(db: Path) -> list[tuple[object, ...]]:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return conn.execute("select * from campaigns").fetchall()
    except sqlite3.OperationalError:  # no tables: nothing stored
        return []
    finally:
        conn.close()


def test_sinfo_s_nodes_are_read_per_partition_with_the_default_marked() -> None:
    parts = parse_partitions("debug*|64|gpu:a100:4(S:0-1)\ndebug*|32|gpu:2\n"
                             "cpu|128|(null)\nbad line\n")
    assert parts.default == "debug"
    assert parts.nodes == {"debug": (NodeFigures(64, 4), NodeFigures(32, 2)),
                           "cpu": (NodeFigures(128, 0),)}
    job = sized('"gpu:4"').jobs[0]  # partition two: not listed, sinfo said nothing of it
    assert partition_problem(job, parts, "s.toml") is None
    empty = Partitions({}, None)
    assert partition_problem(job, empty, "s.toml") is None
    # no slurm.partition: the default one's nodes (sinfo's *)
    gpu4, cpus64 = profile("slurm").jobs
    assert partition_problem(gpu4, parts, "c.toml") is None
    assert partition_problem(cpus64, parts, "c.toml") is None
    small = Partitions({"debug": (NodeFigures(32, 2),)}, "debug")
    assert partition_problem(gpu4, small, "c.toml") == (
        "c.toml: devices: gpu:4 needs 4 GPUs on one node; partition debug's nodes have at "
        "most 2 (sinfo)")
