"""The execution seam: one executor picked per run, and no branch on the executor's
name outside jobs/executors/ (the profile checks, which read the user's string, aside)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import dltop
from dltop.jobs.allocator import Allocation
from dltop.jobs.executors.local import LocalExecutor
from dltop.jobs.executors.pick import for_job, of_stored_run
from dltop.jobs.executors.slurm_run import SlurmBatchExecutor, SlurmStepExecutor
from dltop.jobs.executors.slurm_script import SHARED_NODE_NOTE
from dltop.profiles.loader import parse
from dltop.profiles.model import SlurmSettings
from dltop.store.queue import RunProcess

SRC = Path(dltop.__file__).parent
PROFILE = """
name = "p"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
"""


def _job():  # type: ignore[no-untyped-def]
    return parse(PROFILE, "p.toml", "p").jobs[0]


def test_a_run_gets_the_executor_its_job_and_engine_environment_say() -> None:
    local = _job()
    slurm = replace(local, executor="slurm")
    assert isinstance(for_job(local, {"SLURM_JOB_ID": "7"}), LocalExecutor)
    assert isinstance(for_job(slurm, {}), SlurmBatchExecutor)
    step = for_job(slurm, {"SLURM_JOB_ID": "7"})  # dltop runs inside salloc's allocation
    assert isinstance(step, SlurmStepExecutor) and step.name == "slurm-step"
    # A Slurm run holds and leases none of this host's devices; a local run all it got.
    alloc = Allocation((0, 1), (2, 3))
    assert for_job(local, {}).allocation(alloc) == alloc
    assert step.allocation(alloc) == Allocation((), None)
    shared = replace(slurm, slurm=SlurmSettings(exclusive=False))
    assert step.note(shared) == SHARED_NODE_NOTE and step.note(slurm) is None
    assert for_job(local, {}).note(local) is None


def test_resume_picks_the_executor_a_stored_run_was_started_by() -> None:
    row = RunProcess(1, 1, pid=None, pgid=None, proc_start_time=None)
    assert isinstance(of_stored_run(row), LocalExecutor)
    assert isinstance(of_stored_run(replace(row, slurm_job_id="9")), SlurmBatchExecutor)
    # a step's srun is a local process: its row has the pid
    assert isinstance(of_stored_run(replace(row, pid=5, pgid=5, slurm_job_id="9")),
                      SlurmStepExecutor)


def test_only_the_executors_branch_on_the_executor_name() -> None:
    branch = re.compile(r"""executor"?\]?\s*[!=]=|[!=]=\s*["']slurm["']""")
    found = [f"{p.relative_to(SRC)}:{n}: {line.strip()}"
             for p in SRC.rglob("*.py")
             if not p.is_relative_to(SRC / "jobs" / "executors")
             and not p.is_relative_to(SRC / "profiles")  # checks of the user's string
             and p != SRC / "systems.py"  # checks of the config file's string
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if branch.search(line)]
    assert found == []
