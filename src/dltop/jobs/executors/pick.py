"""Picks the executor of a run, once: by its job for a new run, by the name its row
stores (``runs.executor``) on resume; the registry of executor classes by name.

``DLTOP_EXECUTORS`` (:data:`dltop.catalog.EXECUTORS_ENV`) adds executors to
:data:`BUILT_IN` as ``name=module:Class`` entries: a job with ``executor = "name"``
runs on ``Class()``, and resume reaps its runs with ``Class.of_stored_run(row)``. A
class is imported only when its name is looked up, so this module is light (preflight
and the viewers ask it, through :mod:`dltop.jobs.executors.where`); what a class
declares (:class:`ExecutorClass`) is read off it there.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Protocol, cast

from dltop.catalog import EXECUTORS_ENV, added_executors
from dltop.errors import UserError

if TYPE_CHECKING:
    from dltop.jobs.executors.base import RunExecutor
    from dltop.profiles.jobspec import JobSpec
    from dltop.store.queue import RunProcess

BUILT_IN: Final = {
    "local": "dltop.jobs.executors.local:LocalExecutor",
    "slurm-batch": "dltop.jobs.executors.slurm_run:SlurmBatchExecutor",
    "slurm-step": "dltop.jobs.executors.slurm_run:SlurmStepExecutor",
}
"""Each built-in executor class by its ``RunExecutor.name``."""
JOB_ONLY: Final = {"slurm": "dltop.jobs.executors.slurm_run:SlurmExecutor"}
"""A job's executor that no run is named: a ``slurm`` job's runs are batch jobs or steps
(:func:`~dltop.jobs.executors.slurm_run.slurm_for`), declared by the class they share."""


class ExecutorClass(Protocol):
    """What a registered name leads to: a new run's executor, or a stored run's, and what
    the class declares. A class may also offer ``for_engine(env)``, the executor for an
    engine whose environment is ``env``; :func:`for_job` calls it instead of the class."""

    devices_here: bool
    """Its runs hold this host's devices (allocated, pinned, leased, cooled down, checked
    against its GPUs), not a cluster's nodes."""
    queues: bool
    """Its runs can wait in a queue before they start (Slurm's ``PENDING``)."""

    def __call__(self) -> RunExecutor: ...

    def of_stored_run(self, run: RunProcess) -> RunExecutor: ...


def for_job(job: JobSpec, env: Mapping[str, str] | None = None) -> RunExecutor:
    """The executor of ``job``'s runs from an engine whose environment is ``env``
    (default: this process's; ``SLURM_JOB_ID`` there makes a Slurm run a step)."""
    cls = executor_class(job.executor, env)
    # A class whose runs depend on where the engine runs says so (Slurm: a step inside an
    # allocation, a batch job outside); the others are made plainly.
    for_engine = getattr(cls, "for_engine", None)
    return cls() if for_engine is None else cast("RunExecutor", for_engine(env))


def of_stored_run(run: RunProcess, env: Mapping[str, str] | None = None) -> RunExecutor:
    """The executor that started a stored ``running`` run, by the name it stored."""
    return executor_class(run.executor, env).of_stored_run(run)


def executor_class(name: str, env: Mapping[str, str] | None = None) -> ExecutorClass:
    """The class registered as ``name`` in ``env`` (default: this process's), imported.

    Raises:
        UserError: no executor is registered as ``name``, or its entry names no class.
    """
    # The built-in names cannot be replaced.
    target = {**added_executors(os.environ if env is None else env), **BUILT_IN,
              **JOB_ONLY}.get(name)
    if target is None:
        raise UserError(f"no executor is registered as {name!r} (built in: "
                        f"{', '.join(BUILT_IN)}; add one with {EXECUTORS_ENV}="
                        f"{name}=module:Class)")
    module, _, attr = target.partition(":")
    try:
        return cast(ExecutorClass, getattr(importlib.import_module(module), attr))
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(f"{EXECUTORS_ENV}: executor {name!r} = {target!r}: expected "
                        f"module:Class of an importable class ({exc})") from exc
