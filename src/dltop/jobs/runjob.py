"""One run of a queued job, from its start to its stored result: the engine's per-run half.

:class:`RunLifecycle` is a base of :class:`dltop.jobs.engine.Engine`, which owns the
campaign (queue, allocation, leases, pause and cancel) and starts each job's task;
everything a single run does (cool-down, run folder, the child on the local or the
Slurm executor, storing its outcome, telemetry and environment) is here. Writes go
through the engine's one writer thread (:meth:`RunLifecycle._write`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

from dltop.catalog import ErrorKind, JobStatus, RunStatus
from dltop.errors import DltopError
from dltop.jobs import environment, lease, rundir
from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.collector import IterationCollector, run_fields
from dltop.jobs.cooldown import cool_down
from dltop.jobs.events import EngineEvent, RunFinished, RunStarted
from dltop.jobs.foreign import most_sharing
from dltop.jobs.queued import QueuedJob
from dltop.jobs.slurm import agent_ingestion, supervise_slurm
from dltop.jobs.slurm_script import SHARED_NODE_NOTE, SlurmFiles
from dltop.jobs.supervisor import supervise
from dltop.jobs.writes import RunWrites, TelemetryLoss, join_notes
from dltop.procs import process_start_time
from dltop.profiles.model import JobSpec
from dltop.runners import command, registry
from dltop.store import guard
from dltop.store.guard import StorageError
from dltop.store.writer import Store
from dltop.telemetry.sampler import Sampler

P = ParamSpec("P")
T = TypeVar("T")


class RunLifecycle:
    """The per-run methods of the engine; the attributes are the engine's (set in its
    ``__init__``)."""

    _store: Store
    _campaign_id: int
    _logs_dir: Path
    _db_label: str
    _emit: Callable[[EngineEvent], None]
    _stop: asyncio.Event
    _writer: ThreadPoolExecutor
    counts: dict[str, int]
    _ran_one: bool
    _sampler: Sampler | None
    _alloc: DeviceAllocator
    _run_stops: dict[int, asyncio.Event]
    _leases: dict[int, lease.DeviceLease]
    _failure: StorageError | None
    telemetry_loss: TelemetryLoss

    async def _checkpoint(self, truncate: bool = False) -> None:
        # Best effort: a checkpoint that fails leaves the rows in the -wal file, not lost.
        with contextlib.suppress(StorageError):
            await self._write(self._store.checkpoint, truncate=truncate)

    def _count(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1

    async def _write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._writer, lambda: guard.call(self._db_label, fn, *args, **kwargs))

    async def _cooldown(self, job: JobSpec, gpus: tuple[int, ...],
                        ) -> tuple[float, float | None, float | None]:
        """Wait before a run as the job asks (not before the campaign's first run)."""
        s = self._sampler
        result = await cool_down(job, gpus, s.temperatures if s else None,
                                 s.powers if s else None, self._stop, wait=self._ran_one)
        self._ran_one = True
        return result

    async def _run_job(self, q: QueuedJob, alloc: Allocation, token: int) -> str:
        job = q.spec
        if job.executor == "slurm":  # no local device, pinning or cool-down for it
            alloc = Allocation((), None)
        try:
            # A thread: the interpreter probe can take up to a minute (first run of a
            # framework after --resume, which skips preflight) and other runs go on.
            cmd = await asyncio.to_thread(registry.resolve, job.framework)
            extra = await asyncio.to_thread(command.spec_extra, job)
        except DltopError as exc:
            # Preflight passed, so the host or the config file changed since: this run
            # fails with the reason, the campaign goes on.
            return await self._fail_unstarted(q, ErrorKind.INTERPRETER, str(exc))
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
                                   "", job.units_per_iter)
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
        env = environment.child_env(job, environment.visible_env(), dict(cmd.env),
                                    gpu_indices=alloc.gpu_indices)
        self._emit(RunStarted(run_id, q.job_id, index, total, job, str(log_path)))
        run_stop = self._run_stops[run_id] = asyncio.Event()
        if self._stop.is_set():
            run_stop.set()
        sampler = self._sampler
        collector = IterationCollector(
            run_id, job, self._emit, self._store, write_later,
            on_iteration=(None if sampler is None else
                          lambda t, sec, warm: sampler.iteration(run_id, t, sec, warm)))
        held = self._leases[token]
        write_later(self._store.update_run, run_id,
                    {"device_lease": lease.LEASE_HELD if held.unavailable is None
                     else f"unavailable: {held.unavailable}"})
        ended = asyncio.Event()
        foreign = asyncio.create_task(  # other runners on this host: not a Slurm run's
            most_sharing(alloc.cpu_affinity, alloc.gpu_indices, ended)
            if job.executor != "slurm" else asyncio.sleep(0, 0))
        try:
            outcome = await (supervise_slurm(
                job, run_id, cmd.argv(spec_path), files=SlurmFiles(files.dir, spec_path, log_path),
                env=env, on_event=collector.on_event, stop=run_stop,
                on_state=lambda f: write_later(self._store.update_run, run_id, f),
                on_agent_poll=agent_ingestion(files.dir, lambda g: write_later(
                    self._store.telemetry.add_agent_samples, run_id, g.node, g.gpu, g.host)),
            ) if job.executor == "slurm" else supervise(
                cmd.argv(spec_path), env=env, log_path=log_path, timeout_s=job.timeout_s,
                on_event=collector.on_event, stop=run_stop,
                on_spawn=lambda pid, pgid: self._on_spawn(run_id, alloc, pid, pgid,
                                                          str(log_path), write_later),
                keep_fds=held.fds,
            ))
        finally:
            del self._run_stops[run_id]
            ended.set()
        collector.flush(final=True)
        outcome = collector.short(outcome)
        await writes.settled()
        fields = run_fields(outcome, collector)
        fields["note"] = join_notes(fields.get("note"), writes.note())
        if job.executor == "slurm" and job.slurm is not None and not job.slurm.exclusive:
            # Its timings may include other jobs' load on the same nodes.
            fields["note"] = join_notes(fields["note"], SHARED_NODE_NOTE)
        # Other engines' runners on these devices count as concurrent runs too.
        fields["concurrent_runs"] = self._alloc.overlap(token) + await foreign
        job_status: JobStatus | None = None
        if self._failure is not None and outcome.status == RunStatus.CANCELLED:
            # Stopped because the database failed, not by the user: the job goes back
            # to the queue, so `dltop run --resume` runs it once the cause is fixed.
            fields["error_message"] = f"stopped with the campaign: {self._failure}"
            job_status = JobStatus.QUEUED
        await self._write(self._store.finish_run, run_id, q.job_id, outcome.status, fields,
                          job_status)
        if job.executor == "slurm":  # the summary over every node's agent windows
            await self._write(self._store.telemetry.finish_node_run, run_id,
                              collector.measured_samples)
        elif self._sampler is not None:
            # The summary covers the measured window: energy per sample counts its samples.
            tele = self._sampler.end_run(run_id, collector.measured_samples)
            if tele is not None:
                await self._write(self._store.telemetry.write_run_telemetry, run_id, tele)
            # behind the run's batches on the single writer: their losses are counted
            if (lost := self.telemetry_loss.note(run_id)) is not None:
                fields["note"] = join_notes(fields.get("note"), lost)
                await self._write(self._store.update_run, run_id, {"note": fields["note"]})
        if outcome.hello:
            gpus = [] if sampler is None else [sampler.backend.static(i) for i in alloc.gpu_indices]
            # A Slurm job's variables as its runner had them, not the ones sent
            # (a site's export rules or the setup lines may have changed them).
            had = env if outcome.job_env is None else outcome.job_env
            hello = (outcome.hello if outcome.job_env is None
                     else {**outcome.hello, "job_env": dict(outcome.job_env)})
            await self._write(self._store.record_environment, run_id,
                              environment.environment_row(hello, had, job, gpus, facts))
        await self._checkpoint()
        self._count(outcome.status)
        self._emit(RunFinished(run_id, job, outcome.status, fields.get("median_s"),
                               fields.get("samples_per_s"), fields.get("cv"),
                               bool(fields.get("noisy")), outcome.message))
        return outcome.status

    async def _fail_unstarted(self, q: QueuedJob, kind: ErrorKind, message: str,
                              run_id: int | None = None) -> str:
        """Store a run of ``q`` that could not start as ``crashed`` with its reason
        (``run_id``: the run row already stored, else a new one)."""
        index, total = await self._write(self._store.queue.progress, self._campaign_id)
        if run_id is None:
            attempt = await self._write(self._store.queue.next_attempt, q.job_id)
            run_id = await self._write(self._store.start_run, q.job_id, self._campaign_id,
                                       attempt, "", q.spec.units_per_iter)
        self._emit(RunStarted(run_id, q.job_id, index, total, q.spec, ""))
        await self._write(self._store.finish_run, run_id, q.job_id, RunStatus.CRASHED,
                          {"error_kind": kind, "error_message": message})
        self._count(RunStatus.CRASHED)
        self._emit(RunFinished(run_id, q.spec, RunStatus.CRASHED, None, None, None, False,
                               message))
        return RunStatus.CRASHED

    def _on_spawn(self, run_id: int, alloc: Allocation, pid: int, pgid: int,
                  log_path: str, write_later: Callable[..., None]) -> None:
        if self._sampler is not None:
            self._sampler.begin_run(run_id, pid, alloc.gpu_indices, alloc.cpu_affinity)
        write_later(self._record_spawn, run_id, pid, pgid, log_path)

    def _record_spawn(self, run_id: int, pid: int, pgid: int, log_path: str) -> None:
        # Runs on the writer thread: the start time lets a later engine recognise
        # this process group safely if we die (see jobs.resume).
        self._store.update_run(run_id, {"pid": pid, "pgid": pgid, "log_path": log_path,
                                        "proc_start_time": process_start_time(pid)})
