"""The local executor: the runner is a child process group of this engine, on this host."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.executors.base import Launch, Reaped, Write
from dltop.jobs.foreign import most_sharing
from dltop.jobs.lease import run_devices
from dltop.jobs.supervisor import ChildOutcome, reap_orphan_group, supervise
from dltop.jobs.writes import TelemetryLoss
from dltop.procs import process_start_time
from dltop.profiles.jobspec import JobSpec
from dltop.store.queue import RunProcess
from dltop.store.writer import Store
from dltop.telemetry.sampler import Sampler


class LocalExecutor:
    """Runs the runner here through :func:`dltop.jobs.supervisor.supervise`."""

    name = "local"
    devices_here = True
    queues = False

    @classmethod
    def of_stored_run(cls, run: RunProcess) -> LocalExecutor:
        return LOCAL

    def allocation(self, alloc: Allocation) -> Allocation:
        return alloc

    def lease_names(self, alloc: Allocation, allocator: DeviceAllocator) -> tuple[str, ...]:
        return run_devices(alloc, allocator)

    async def supervise(self, launch: Launch) -> ChildOutcome:
        log_path = launch.files.log_path

        def on_spawn(pid: int, pgid: int) -> None:
            if launch.sampler is not None:
                launch.sampler.begin_run(launch.run_id, pid, launch.alloc.gpu_indices,
                                         launch.alloc.cpu_affinity)
            launch.write_later(_record_spawn, launch.store, launch.run_id, pid, pgid,
                               str(log_path))

        return await supervise(
            launch.argv, env=launch.env, log_path=log_path, timeout_s=launch.job.timeout_s,
            on_event=launch.on_event, stop=launch.stop, on_spawn=on_spawn,
            keep_fds=launch.keep_fds)

    async def sharing(self, alloc: Allocation, ended: asyncio.Event) -> int:
        return await most_sharing(alloc.cpu_affinity, alloc.gpu_indices, ended)

    def note(self, job: JobSpec) -> str | None:
        return None

    async def summarise_telemetry(self, run_id: int, measured_samples: int, write: Write,
                                  sampler: Sampler | None, store: Store,
                                  loss: TelemetryLoss) -> str | None:
        if sampler is None:
            return None
        # The summary covers the measured window: energy per sample counts its samples.
        tele = sampler.end_run(run_id, measured_samples)
        if tele is not None:
            await write(store.telemetry.write_run_telemetry, run_id, tele)
        # Behind the run's batches on the single writer: their losses are counted.
        return loss.note(run_id)

    def reap(self, store: Store, run: RunProcess, env: Mapping[str, str]) -> Reaped:
        return Reaped(reap_orphan_group(run.pid, run.pgid, run.proc_start_time))


def _record_spawn(store: Store, run_id: int, pid: int, pgid: int, log_path: str) -> None:
    # Runs on the writer thread: the start time lets a later engine recognise
    # this process group safely if we die (see jobs.resume).
    store.update_run(run_id, {"pid": pid, "pgid": pgid, "log_path": log_path,
                              "proc_start_time": process_start_time(pid)})


LOCAL = LocalExecutor()
"""The one local executor (it holds no state)."""

