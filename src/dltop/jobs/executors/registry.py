"""Executors by name: the name a run stores (``runs.executor``) leads here on resume,
and a job's ``executor`` leads here for a new run (:mod:`.pick`).

The built-in executors are :data:`BUILT_IN`; ``DLTOP_EXECUTORS``
(:data:`dltop.catalog.EXECUTORS_ENV`) adds more as ``name=module:Class`` entries, so a
new executor is a class of its own and that entry, not a change to dltop: a job with
``executor = "name"`` runs on ``Class()`` on this host's devices, and resume reaps its
stored runs with ``Class.of_stored_run(row)``. Nothing is imported until a name is
looked up: a viewer that only names executors loads none of them.
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
    from dltop.store.queue import RunProcess

BUILT_IN: Final = {
    "local": "dltop.jobs.executors.local:LocalExecutor",
    "slurm-batch": "dltop.jobs.executors.slurm_run:SlurmBatchExecutor",
    "slurm-step": "dltop.jobs.executors.slurm_run:SlurmStepExecutor",
}
"""Each built-in executor by its :attr:`RunExecutor.name` (a ``slurm`` job's run is a
batch job, or a step inside the allocation its engine runs in: :func:`.pick.for_job`)."""


class ExecutorClass(Protocol):
    """What a registered name leads to: an executor class."""

    def __call__(self) -> RunExecutor:
        """The executor of a new run of a job that names it."""
        ...

    def of_stored_run(self, run: RunProcess) -> RunExecutor:
        """The executor that started ``run`` (a row its dead engine left ``running``)."""
        ...


def registered(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every executor's ``module:Class`` by name: the built-in ones, then
    ``DLTOP_EXECUTORS``'s in ``env`` (default: this process's), which cannot replace them."""
    return {**added_executors(os.environ if env is None else env), **BUILT_IN}


def executor_class(name: str, env: Mapping[str, str] | None = None) -> ExecutorClass:
    """The class registered as ``name``, imported now.

    Raises:
        UserError: no executor is registered as ``name``, or its entry names no class.
    """
    target = registered(env).get(name)
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
