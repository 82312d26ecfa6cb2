"""The two Slurm executors: a run as its own batch job, or as a step of the allocation
this engine runs in (``salloc``: ``SLURM_JOB_ID`` set). Both are followed by
:func:`dltop.jobs.executors.slurm.supervise_slurm`; only how the job starts, and what a
dead engine leaves of it, differ."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.executors.base import Launch, Reaped, Write
from dltop.jobs.executors.slurm import (
    agent_ingestion,
    cancel_orphan,
    is_orphan_job,
    supervise_slurm,
)
from dltop.jobs.executors.slurm_acct import step_usage
from dltop.jobs.executors.slurm_adopt import adopt_completed, is_live, run_dir_of, slurm_job_now
from dltop.jobs.executors.slurm_files import SHARED_NODE_NOTE, SlurmFiles
from dltop.jobs.supervisor import ChildOutcome, reap_orphan_group
from dltop.jobs.writes import TelemetryLoss
from dltop.profiles.jobspec import JobSpec
from dltop.store.queue import RunProcess
from dltop.store.writer import Store
from dltop.telemetry.sampler import Sampler

NO_DEVICES = Allocation((), None)


class SlurmExecutor:
    """What both Slurm executors share: the devices are the compute nodes', not this
    host's (no allocation, pinning, lease, cool-down or foreign check here), and a run
    can wait in Slurm's queue. Registered as the executor of ``slurm`` jobs
    (:data:`dltop.jobs.executors.pick.JOB_ONLY`) for what it declares."""

    name = "slurm"
    devices_here = False
    queues = True
    _outer_job: str | None = None
    _node: str | None = None

    @property
    def outer_job(self) -> str | None:
        """The allocation this engine runs in (a step executor's), else None."""
        return self._outer_job

    @classmethod
    def for_engine(cls, env: Mapping[str, str] | None = None) -> SlurmExecutor:
        """The Slurm executor for an engine with ``env`` (:func:`slurm_for`)."""
        return slurm_for(env)

    def allocation(self, alloc: Allocation) -> Allocation:
        return NO_DEVICES

    def lease_names(self, alloc: Allocation, allocator: DeviceAllocator) -> tuple[str, ...]:
        return ()  # the cluster's to hand out

    async def supervise(self, launch: Launch) -> ChildOutcome:
        store, run_id, later = launch.store, launch.run_id, launch.write_later
        files = launch.files
        return await supervise_slurm(
            launch.job, run_id, launch.argv,
            files=SlurmFiles(files.dir, files.spec_path, files.log_path),
            env=launch.env, on_event=launch.on_event, stop=launch.stop,
            on_state=lambda f: later(store.update_run, run_id, f),
            on_agent_poll=agent_ingestion(files.dir, lambda g: later(
                store.telemetry.add_agent_samples, run_id, g.node, g.gpu, g.host)),
            outer_job=self._outer_job, node=self._node)

    async def sharing(self, alloc: Allocation, ended: asyncio.Event) -> int:
        return 0

    def note(self, job: JobSpec) -> str | None:
        # Its timings may include other jobs' load on the same nodes.
        return (SHARED_NODE_NOTE if job.slurm is not None and not job.slurm.exclusive
                else None)

    async def summarise_telemetry(self, run_id: int, measured_samples: int, write: Write,
                                  sampler: Sampler | None, store: Store,
                                  loss: TelemetryLoss) -> str | None:
        # The summary over every node's agent windows.
        await write(store.telemetry.finish_node_run, run_id, measured_samples)
        return None

    def reap(self, store: Store, run: RunProcess, env: Mapping[str, str]) -> Reaped:
        return Reaped(reap_orphan_group(run.pid, run.pgid, run.proc_start_time))


class SlurmBatchExecutor(SlurmExecutor):
    """A run is one batch job (``sbatch``), watched from the login host."""

    name = "slurm-batch"

    @classmethod
    def of_stored_run(cls, run: RunProcess) -> SlurmBatchExecutor:
        return SLURM_BATCH

    def reap(self, store: Store, run: RunProcess, env: Mapping[str, str]) -> Reaped:
        killed = reap_orphan_group(run.pid, run.pgid, run.proc_start_time)
        job_id = run.slurm_job_id
        if not job_id or not is_orphan_job(run.pid, job_id, run.slurm_state):
            return Reaped(killed)
        # Asked first: scancel exits 0 for a finished or unknown job too, and a
        # COMPLETED job's results are on the shared filesystem, not to be thrown away.
        now = slurm_job_now(job_id, env, run_dir_of(store, run.run_id))
        if now.state == "COMPLETED" and adopt_completed(store, run) is not None:
            return Reaped(killed, kept=True)
        if is_live(now):
            # The batch job outlived its engine: it would hold its nodes (and train
            # on) beside the run that replaces it.
            why = cancel_orphan(job_id, env)
            if why is None:
                return Reaped(killed, cancelled=job_id)
            return Reaped(killed, warning=f"run {run.run_id}: {why}; cancel Slurm job "
                                          f"{job_id} yourself")
        if now.state is None:
            return Reaped(killed, warning=f"run {run.run_id}: Slurm job {job_id}: "
                                          f"{now.source}; its run is re-run")
        return Reaped(killed)


class SlurmStepExecutor(SlurmExecutor):
    """A run is a step of the allocation ``outer_job`` this engine runs in: its
    ``batch.sh`` runs here and its srun is a local process (reaped as one on resume)."""

    name = "slurm-step"

    def __init__(self, outer_job: str, group: bool = False, node: str | None = None) -> None:
        self._outer_job, self._node = outer_job, node
        """``node``: the one the step must run on (its group's server's, ``--nodelist``)."""
        self._group_job = outer_job if group else None
        """A server group's job: a run that is its step gets its step's accounting."""

    async def supervise(self, launch: Launch) -> ChildOutcome:
        outcome = await super().supervise(launch)
        if self._group_job is not None:
            got = await step_usage(self._group_job, outcome.job_env, launch.env)
            launch.write_later(launch.store.update_run, launch.run_id, got)
        return outcome

    @classmethod
    def of_stored_run(cls, run: RunProcess) -> SlurmStepExecutor:
        # A step's row holds its allocation's job id (its srun is the row's pid).
        return cls(run.slurm_job_id or "")


SLURM_BATCH = SlurmBatchExecutor()


def slurm_for(env: Mapping[str, str] | None = None) -> SlurmExecutor:
    """The Slurm executor for an engine with ``env``: a step inside an allocation."""
    outer = (os.environ if env is None else env).get("SLURM_JOB_ID")
    return SLURM_BATCH if outer is None else SlurmStepExecutor(outer)
