"""Picks the executor of a run, once: by its job for a new run, by its row on resume."""

from __future__ import annotations

from collections.abc import Mapping

from dltop.jobs.executors.base import RunExecutor
from dltop.jobs.executors.local import LOCAL
from dltop.jobs.executors.slurm_run import SLURM_BATCH, SlurmStepExecutor, slurm_for
from dltop.jobs.executors.where import on_this_host
from dltop.profiles.model import JobSpec
from dltop.store.queue import RunProcess


def for_job(job: JobSpec, env: Mapping[str, str] | None = None) -> RunExecutor:
    """The executor of ``job``'s runs from an engine whose environment is ``env``
    (default: this process's; ``SLURM_JOB_ID`` there makes a Slurm run a step)."""
    return LOCAL if on_this_host(job) else slurm_for(env)


def of_stored_run(run: RunProcess) -> RunExecutor:
    """The executor a stored ``running`` run was started by, as its row tells: a Slurm
    job id with a local pid is a step (its srun), without one a batch job."""
    if not run.slurm_job_id:
        return LOCAL
    return SLURM_BATCH if not run.pid else SlurmStepExecutor(run.slurm_job_id)
