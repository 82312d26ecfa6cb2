"""One run of a queued job, from its start to its stored result: the engine's per-run half.

:class:`RunLifecycle` is an object the :class:`dltop.jobs.engine.Engine` makes with
what a run needs of the campaign (store, writer, sampler, allocator, leases); the
engine owns the campaign (queue, allocation, leases, pause and cancel) and starts
each job's task. Everything a single run does (cool-down, run folder, the runner on
its :class:`~dltop.jobs.executors.base.RunExecutor`, storing its outcome, telemetry
and environment) is here. Writes go through the engine's one writer thread (``write``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dltop.catalog import ErrorKind, JobStatus, RunStatus
from dltop.errors import DltopError
from dltop.jobs import environment, lease, rundir
from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.collector import IterationCollector, run_fields
from dltop.jobs.cooldown import cool_down
from dltop.jobs.events import EngineEvent, RunFinished, RunStarted
from dltop.jobs.executors.base import Launch, RunExecutor, Write
from dltop.jobs.executors.slurm_group import (
    queue_columns,
    shared_host,
    step_executor,
    unstarted,
)
from dltop.jobs.queued import QueuedJob
from dltop.jobs.rundir import SERVER_LOG
from dltop.jobs.servergroup import Key, ServerGroups, local_host, runner_env
from dltop.jobs.writes import RunWrites, TelemetryLoss, join_notes
from dltop.profiles.jobspec import JobSpec
from dltop.runners import command, registry
from dltop.store.guard import StorageError
from dltop.store.writer import Store
from dltop.telemetry.sampler import Sampler


class RunLifecycle:
    """Runs one queued job at a time on its executor and stores its outcome.

    Args:
        store: the engine's store (used on the writer thread only, through ``write``).
        campaign_id: the campaign the runs belong to.
        logs_dir: where each run's folder is made.
        write: runs a store call on the engine's one writer thread.
        writer: that thread (a run's queued writes go behind the earlier ones).
        db_label: the database's name in storage errors.
        emit: receives the runs' events.
        stop: set when the campaign stops (a run starting then is cancelled).
        counts: the campaign's count per final status (shared with the engine).
        sampler: the host's telemetry sampler, or None.
        allocator: the engine's device allocator (concurrent runs are its overlap).
        leases: allocator token -> the devices' lease the run holds.
        telemetry_loss: the telemetry batches the database refused, per run.
        failure: the database failure that stopped the campaign, or None.
    """

    def __init__(self, *, store: Store, campaign_id: int, logs_dir: Path, write: Write,
                 writer: ThreadPoolExecutor, db_label: str,
                 emit: Callable[[EngineEvent], None], stop: asyncio.Event,
                 counts: dict[str, int], sampler: Sampler | None, allocator: DeviceAllocator,
                 leases: dict[int, lease.DeviceLease], telemetry_loss: TelemetryLoss,
                 failure: Callable[[], StorageError | None]) -> None:
        self._store = store
        self._campaign_id = campaign_id
        self._logs_dir = logs_dir
        self._write = write
        self._writer = writer
        self._db_label = db_label
        self._emit = emit
        self._stop = stop
        self._counts = counts
        self._sampler = sampler
        self._alloc = allocator
        self._leases = leases
        self._telemetry_loss = telemetry_loss
        self._failure = failure
        self._ran_one = False
        self.run_stops: dict[int, asyncio.Event] = {}
        """Run id -> the event that cancels that run only."""
        self.user_cancelled: set[int] = set()
        """Runs a viewer cancelled one by one (``cancelled by the user``)."""
        self.stop_reason: str | None = None
        """What stopped the campaign (the engine's ``stop_reason``): its cancelled runs'
        message, unless a viewer cancelled the run itself."""
        self.servers = ServerGroups(sampler)
        """The servers shared by a group of serve runs (the engine stops them at its end)."""

    async def checkpoint(self, truncate: bool = False) -> None:
        """Copy the log into the database file (best effort: a checkpoint that fails
        leaves the rows in the -wal file, not lost)."""
        with contextlib.suppress(StorageError):
            await self._write(self._store.checkpoint, truncate=truncate)

    def _count(self, status: str) -> None:
        self._counts[status] = self._counts.get(status, 0) + 1

    async def _cooldown(self, job: JobSpec, gpus: tuple[int, ...],
                        ) -> tuple[float, float | None, float | None]:
        """Wait before a run as the job asks (not before the campaign's first run)."""
        s = self._sampler
        result = await cool_down(job, gpus, s.temperatures if s else None,
                                 s.powers if s else None, self._stop, wait=self._ran_one)
        self._ran_one = True
        return result

    async def run(self, q: QueuedJob, alloc: Allocation, token: int,
                  executor: RunExecutor) -> str:
        """Run ``q`` once on ``executor`` (``alloc``: the allocator's devices, ``token``:
        its lease); return the run's final status."""
        served: list[tuple[Key | None, int]] = []
        try:
            return await self._run(q, alloc, token, executor, served)
        finally:  # a run that raised still gives back its group's turn and server
            for key, run_id in served:
                await self.servers.release(key, run_id, RunStatus.CRASHED)

    async def _run(self, q: QueuedJob, alloc: Allocation, token: int, executor: RunExecutor,
                   holding: list[tuple[Key | None, int]]) -> str:
        job = q.spec
        alloc = executor.allocation(alloc)  # a Slurm run: no local device, pinning or cool-down
        try:
            # A thread: the interpreter probe can take up to a minute (first run of a
            # framework after --resume, which skips preflight) and other runs go on.
            cmd = await asyncio.to_thread(registry.resolve, job.framework)
            extra = await asyncio.to_thread(command.spec_extra, job)
        except DltopError as exc:
            # Preflight passed, so the host or the config file changed since: this run
            # fails with the reason, the campaign goes on.
            return await self._fail_unstarted(q, ErrorKind.INTERPRETER, str(exc),
                                              executor=executor.name)
        waited_s, start_temp, start_power = await self._cooldown(job, alloc.gpu_indices)
        if self._stop.is_set():
            await self._write(self._store.set_job_status, q.job_id, RunStatus.CANCELLED)
            self._count(RunStatus.CANCELLED)
            return RunStatus.CANCELLED
        facts = (await asyncio.to_thread(environment.gpu_facts, alloc.gpu_indices)
                 if alloc.gpu_indices else ())
        writes = RunWrites(self._writer, self._db_label)
        # Ordered behind earlier writes by the single worker; awaited at run end.
        write_later = writes.later

        index, total = await self._write(self._store.queue.progress, self._campaign_id)
        attempt = await self._write(self._store.queue.next_attempt, q.job_id)
        run_id = await self._write(self._store.start_run, q.job_id, self._campaign_id, attempt,
                                   "", job.units_per_iter, executor.name)
        write_later(self._store.update_run, run_id, {
            "cooldown_waited_s": waited_s, "start_temp_c": start_temp,
            "start_power_w": start_power,
            "gpu_indices": ",".join(map(str, alloc.gpu_indices)) or None,
            "cpu_affinity": (None if alloc.cpu_affinity is None
                             else ",".join(map(str, alloc.cpu_affinity)))})
        affinity = None if alloc.cpu_affinity is None else list(alloc.cpu_affinity)
        try:  # 0700 folder, files O_EXCL | O_NOFOLLOW: a planted link is never written
            files = rundir.prepare_run_dir(self._logs_dir, run_id, {
                **job.to_json_dict(), "run_id": run_id, "cpu_affinity": affinity, **extra})
        except rundir.UnsafeRunDir as exc:
            await writes.settled()
            return await self._fail_unstarted(q, ErrorKind.RUN_DIR, str(exc), run_id=run_id)
        except OSError as exc:  # the directory became unwritable, or the disk is full
            await writes.settled()
            where = rundir.run_dir(self._logs_dir, run_id)
            return await self._fail_unstarted(
                q, ErrorKind.STORAGE, f"cannot write {where}: {exc.strerror or exc}",
                run_id=run_id)
        log_path, spec_path = files.log_path, files.spec_path
        env = environment.child_env(job, dict(os.environ), dict(cmd.env),
                                    gpu_indices=alloc.gpu_indices)
        self._emit(RunStarted(run_id, q.job_id, index, total, job, str(log_path)))
        run_stop = self.run_stops[run_id] = asyncio.Event()
        if self._stop.is_set():
            run_stop.set()
        sampler = self._sampler
        collector = IterationCollector(
            run_id, job, self._emit, self._store, write_later,
            on_iteration=(None if sampler is None else
                          lambda t, sec, warm: sampler.iteration(run_id, t, sec, warm)),
            on_idle=None if sampler is None else lambda a, b: sampler.idle(run_id, a, b))
        held = self._leases[token]
        write_later(self._store.update_run, run_id,
                    {"device_lease": lease.LEASE_HELD if held.unavailable is None
                     else f"unavailable: {held.unavailable}"})
        # A group's server, started before its first run: here, or as a Slurm job
        # whose steps the group's runs then are
        key, launch = shared_host(job, run_id, executor, alloc.gpu_indices)
        served = await self.servers.acquire(
            key, run_id, [cmd.python, str(cmd.script.with_name("openai_server.py")),
                          str(spec_path)], files.dir, env, run_stop, launch or local_host)
        holding.append((key, run_id))
        env.update(runner_env(served))
        executor = step_executor(served, executor, env)
        if queued := queue_columns(served):  # the group job's time in Slurm's queue, or 0
            write_later(self._store.update_run, run_id, queued)
        ended = asyncio.Event()
        # other runners on this host's devices (none for a Slurm run)
        foreign = asyncio.create_task(executor.sharing(alloc, ended))
        try:
            # a Slurm group's server that did not start: nothing is submitted
            outcome = unstarted(served, run_stop, launch is not None,
                                files.dir / SERVER_LOG) or await executor.supervise(Launch(
                job, run_id, cmd.argv(spec_path), files, env, alloc, collector.on_event,
                run_stop, self._store, write_later, sampler, keep_fds=held.fds))
        finally:
            del self.run_stops[run_id]
            ended.set()
        collector.flush(final=True)
        outcome = collector.short(outcome)
        if (outcome.status == RunStatus.CANCELLED and self.stop_reason is not None
                and run_id not in self.user_cancelled):  # SIGTERM is not the user
            outcome = dataclasses.replace(outcome, message=self.stop_reason)
        self.user_cancelled.discard(run_id)
        if outcome.status != RunStatus.OK and (gone := await self.servers.ended(key)):
            outcome = dataclasses.replace(outcome, message=join_notes(outcome.message, gone))
        await writes.settled()
        fields = run_fields(outcome, collector)
        fields["note"] = join_notes(fields.get("note"), writes.note())
        fields["note"] = join_notes(fields["note"], executor.note(job))
        # Other engines' runners on these devices count as concurrent runs too.
        fields["concurrent_runs"] = self._alloc.overlap(token) + await foreign
        job_status: JobStatus | None = None
        failure = self._failure()
        if failure is not None and outcome.status == RunStatus.CANCELLED:
            # Stopped because the database failed, not by the user: the job goes back
            # to the queue, so `dltop run --resume` runs it once the cause is fixed.
            fields["error_message"] = f"stopped with the campaign: {failure}"
            job_status = JobStatus.QUEUED
        await self._write(self._store.finish_run, run_id, q.job_id, outcome.status, fields,
                          job_status)
        lost = await executor.summarise_telemetry(run_id, collector.measured_samples,
                                                  self._write, sampler, self._store,
                                                  self._telemetry_loss)
        if lost is not None:
            fields["note"] = join_notes(fields.get("note"), lost)
            await self._write(self._store.update_run, run_id, {"note": fields["note"]})
        await self.servers.release(key, run_id, outcome.status)  # after its telemetry
        if outcome.hello:
            gpus = [] if sampler is None else [sampler.backend.static(i) for i in alloc.gpu_indices]
            # A Slurm job's variables as its runner had them, not the ones sent
            # (a site's export rules or the setup lines may have changed them).
            had = env if outcome.job_env is None else outcome.job_env
            hello = (outcome.hello if outcome.job_env is None
                     else {**outcome.hello, "job_env": dict(outcome.job_env)})
            await self._write(self._store.record_environment, run_id,
                              environment.environment_row(hello, had, job, gpus, facts))
        await self.checkpoint()
        self._count(outcome.status)
        self._emit(RunFinished(run_id, job, outcome.status, fields.get("median_s"),
                               fields.get("samples_per_s"), fields.get("cv"),
                               bool(fields.get("noisy")), outcome.message))
        return outcome.status

    async def _fail_unstarted(self, q: QueuedJob, kind: ErrorKind, message: str,
                              run_id: int | None = None, executor: str = "local") -> str:
        """Store a run of ``q`` that could not start as ``crashed`` with its reason
        (``run_id``: the run row already stored, else a new one on ``executor``)."""
        index, total = await self._write(self._store.queue.progress, self._campaign_id)
        if run_id is None:
            attempt = await self._write(self._store.queue.next_attempt, q.job_id)
            run_id = await self._write(self._store.start_run, q.job_id, self._campaign_id,
                                       attempt, "", q.spec.units_per_iter, executor)
        self._emit(RunStarted(run_id, q.job_id, index, total, q.spec, ""))
        await self._write(self._store.finish_run, run_id, q.job_id, RunStatus.CRASHED,
                          {"error_kind": kind, "error_message": message})
        self._count(RunStatus.CRASHED)
        self._emit(RunFinished(run_id, q.spec, RunStatus.CRASHED, None, None, None, False,
                               message))
        return RunStatus.CRASHED
