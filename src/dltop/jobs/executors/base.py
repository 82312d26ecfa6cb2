"""The seam between one run's lifecycle and where its runner executes.

A :class:`RunExecutor` is chosen once per run (:func:`dltop.jobs.executors.pick.for_job`)
and answers every question whose answer differs between this host and a Slurm
cluster: which of this host's devices the run holds and leases, how the runner is
launched, supervised and cancelled, what its telemetry summary is, and, for
``dltop run --resume``, what is left of it after its engine died
(:func:`dltop.jobs.executors.pick.of_stored_run`). Preflight's question (are the
devices this host's?) is :mod:`dltop.jobs.executors.where`'s, the one test of
``JobSpec.executor`` outside the profile checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.eventreader import EventHandler
from dltop.jobs.rundir import RunFiles
from dltop.jobs.supervisor import ChildOutcome
from dltop.jobs.writes import TelemetryLoss
from dltop.profiles.jobspec import JobSpec
from dltop.store.queue import RunProcess
from dltop.store.writer import Store
from dltop.telemetry.sampler import Sampler

P = ParamSpec("P")
T = TypeVar("T")


class Write(Protocol):
    """Runs ``fn(*args, **kwargs)`` on the engine's one writer thread; awaited."""

    def __call__(self, fn: Callable[P, T], *args: P.args,
                 **kwargs: P.kwargs) -> Coroutine[Any, Any, T]: ...


WriteLater = Callable[..., None]
"""Queues a write behind the earlier ones (:meth:`dltop.jobs.writes.RunWrites.later`)."""


@dataclass(frozen=True)
class Launch:
    """Everything an executor needs to start and follow one run's runner."""

    job: JobSpec
    run_id: int
    argv: Sequence[str]
    """The runner's argv on one host (interpreter, script, spec file)."""
    files: RunFiles
    env: Mapping[str, str]
    alloc: Allocation
    """This host's devices the run holds (none for a Slurm run)."""
    on_event: EventHandler
    stop: asyncio.Event
    """Set: the run is cancelled (its group TERMed, or its Slurm job ``scancel`` ed)."""
    store: Store
    """Read only for its bound methods, which run through ``write_later``."""
    write_later: WriteLater
    sampler: Sampler | None
    keep_fds: Sequence[int] = ()
    """The device lease's descriptors, kept open in a local child."""


@dataclass(frozen=True)
class Reaped:
    """What ``dltop run --resume`` found of one run a dead engine left ``running``."""

    killed: int
    """Local processes killed (the runner's group, or a step's srun)."""
    kept: bool = False
    """Its Slurm job had COMPLETED: the run was read from its events file and kept."""
    cancelled: str | None = None
    """The Slurm batch job ``scancel`` ed because it still held its nodes."""
    warning: str | None = None
    """What could not be cleaned up or told."""


class RunExecutor(Protocol):
    """Where one run's runner executes: this host, a Slurm batch job, or a step."""

    name: str
    """``local``, ``slurm-batch`` or ``slurm-step`` (for messages and tests)."""

    def allocation(self, alloc: Allocation) -> Allocation:
        """Prepare: the part of the allocator's ``alloc`` the run really holds here."""
        ...

    def lease_names(self, alloc: Allocation, allocator: DeviceAllocator) -> tuple[str, ...]:
        """Allocate: the host-wide lock names the run takes (:mod:`dltop.jobs.lease`)."""
        ...

    async def supervise(self, launch: Launch) -> ChildOutcome:
        """Launch the runner and follow it to its end; setting ``launch.stop`` cancels."""
        ...

    async def sharing(self, alloc: Allocation, ended: asyncio.Event) -> int:
        """The most foreign runners seen on the run's devices until ``ended`` is set."""
        ...

    def note(self, job: JobSpec) -> str | None:
        """A caveat every run of ``job`` on this executor carries in ``runs.note``."""
        ...

    async def summarise_telemetry(self, run_id: int, measured_samples: int, write: Write,
                                  sampler: Sampler | None, store: Store,
                                  loss: TelemetryLoss) -> str | None:
        """Store the run's telemetry summary over its measured window; return the note
        its lost telemetry batches need, or None."""
        ...

    def reap(self, store: Store, run: RunProcess, env: Mapping[str, str]) -> Reaped:
        """Resume: clean up what a dead engine left of ``run`` (blocking, no event loop)."""
        ...
