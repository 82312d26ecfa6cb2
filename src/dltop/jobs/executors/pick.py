"""Picks the executor of a run, once: by its job for a new run, by its row on resume."""

from __future__ import annotations

from collections.abc import Mapping

from dltop.jobs.executors.base import RunExecutor
from dltop.jobs.executors.registry import executor_class
from dltop.jobs.executors.slurm_run import slurm_for
from dltop.jobs.executors.where import on_this_host
from dltop.profiles.model import JobSpec
from dltop.store.queue import RunProcess


def for_job(job: JobSpec, env: Mapping[str, str] | None = None) -> RunExecutor:
    """The executor of ``job``'s runs from an engine whose environment is ``env``
    (default: this process's; ``SLURM_JOB_ID`` there makes a Slurm run a step)."""
    return executor_class(job.executor, env)() if on_this_host(job) else slurm_for(env)


def of_stored_run(run: RunProcess, env: Mapping[str, str] | None = None) -> RunExecutor:
    """The executor that started a stored ``running`` run, by the name its row stores
    (``runs.executor``), registered in ``env`` (default: this process's)."""
    return executor_class(run.executor, env).of_stored_run(run)
