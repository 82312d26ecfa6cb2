"""Preflight of Slurm jobs: the login node's devices do not matter, sbatch does."""

from __future__ import annotations

import pytest

from dltop.errors import UserError
from dltop.jobs.campaign import preflight
from dltop.jobs.executors.where import SBATCH_MISSING
from dltop.profiles.loader import parse
from dltop.profiles.model import Profile

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


def test_gpu_jobs_on_the_slurm_executor_pass_on_a_login_node_without_gpus(
        slurm_env: LocalSlurm) -> None:
    # sbatch is on PATH here (the fixture fails naming the packages otherwise)
    plan = preflight([profile("slurm")], gpu_count=0, skip_unavailable=False)
    assert plan.problems == (None, None)
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
