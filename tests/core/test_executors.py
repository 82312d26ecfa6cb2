"""The execution seam: one executor picked per run, and no branch on the executor's
name outside jobs/executors/ (the profile checks, which read the user's string, aside)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import sqlite_utils

import dltop
from dltop.errors import UserError
from dltop.jobs.allocator import Allocation
from dltop.jobs.executors.local import LocalExecutor
from dltop.jobs.executors.pick import for_job, of_stored_run
from dltop.jobs.executors.slurm_files import SHARED_NODE_NOTE
from dltop.jobs.executors.slurm_run import SlurmBatchExecutor, SlurmStepExecutor
from dltop.jobs.executors.where import on_this_host, queued_reason
from dltop.profiles.loader import parse
from dltop.profiles.slurm import SlurmSettings
from dltop.store import Store
from dltop.store.db import connect
from dltop.store.migrations import apply
from dltop.store.queue import RunProcess
from dltop.store.read.jobruns import running

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


def test_resume_picks_the_executor_a_stored_run_was_started_by(tmp_path: Path) -> None:
    # Rows stored before migration 30 get the name the Slurm columns told: a Slurm job
    # with a local pid (a step's srun) is a step, without one a batch job.
    path = tmp_path / "old.db"
    old = sqlite_utils.Database(path)
    apply(old, upto=29)
    for pid, slurm_job in ((7, None), (None, "9"), (8, "9")):
        old["runs"].insert({"job_id": 1, "campaign_id": 1, "attempt": 1, "pid": pid,
                            "pgid": pid, "status": "running", "slurm_job_id": slurm_job})
    old.conn.close()
    store = Store(connect(path))
    kinds = [type(of_stored_run(r)) for r in store.queue.running_runs(1)]
    assert kinds == [LocalExecutor, SlurmBatchExecutor, SlurmStepExecutor]
    # A new run stores its executor's name; its row, not its Slurm columns, decides.
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    run = store.start_run(store.add_jobs(cid, [_job()])[0], cid, 1, "", 8, "slurm-batch")
    (row,) = [r for r in store.queue.running_runs(cid) if r.run_id == run]
    assert row.executor == "slurm-batch" and row.slurm_job_id is None
    assert isinstance(of_stored_run(row), SlurmBatchExecutor)


def test_an_unregistered_executor_name_is_refused_with_the_way_to_add_one() -> None:
    row = RunProcess(1, 1, pid=None, pgid=None, proc_start_time=None, executor="ssh")
    with pytest.raises(UserError, match=r"no executor is registered as 'ssh'.*"
                                        r"DLTOP_EXECUTORS=ssh=module:Class"):
        of_stored_run(row, {})
    with pytest.raises(UserError, match=re.escape(
            "DLTOP_EXECUTORS: executor 'ssh' = 'no.such:X'")):
        of_stored_run(row, {"DLTOP_EXECUTORS": "ssh=no.such:X"})


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


def test_where_a_job_runs_and_whether_its_run_queues_are_what_its_executor_declares(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.core.exec_thirdparty import NAME, ThirdPartyExecutor

    monkeypatch.setenv("DLTOP_EXECUTORS", f"{NAME}=tests.core.exec_thirdparty:"
                                          "ThirdPartyExecutor")
    job = replace(_job(), executor=NAME)
    store = Store(connect(tmp_path / "d.db"))
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    run = store.start_run(store.add_jobs(cid, [job])[0], cid, 1, "", 8, NAME)
    store.update_run(run, {"slurm_job_id": "5", "slurm_state": "PENDING",
                           "slurm_reason": "Priority"})
    (row,) = running(store.db, cid)
    assert on_this_host(job) and isinstance(for_job(job), ThirdPartyExecutor)
    assert queued_reason(row) is None  # its runs never wait in a queue
    assert not on_this_host(replace(job, executor="slurm"))
    assert on_this_host(replace(job, executor="local"))
    monkeypatch.setattr(ThirdPartyExecutor, "devices_here", False)
    monkeypatch.setattr(ThirdPartyExecutor, "queues", True)
    assert not on_this_host(job) and queued_reason(row) == "Priority"
