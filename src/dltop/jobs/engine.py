"""The engine: runs a campaign's queued jobs and stores everything.

Jobs run one at a time by default; with packing, the
:class:`~dltop.jobs.allocator.DeviceAllocator` lets runs on disjoint devices go
at once. Each run first takes the host-wide lease of its devices
(:mod:`dltop.jobs.lease`; the whole host when the campaign does not pack), so
another engine on the host waits rather than running beside it.

It owns one writer thread (a single-worker executor holding the
:class:`~dltop.store.Store`), so SQLite never blocks the event loop and there is
one write connection. Children are started only through
:func:`dltop.jobs.supervisor.supervise`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

from dltop.catalog import CampaignStatus, Control, ErrorKind, JobStatus, RunStatus, control_of
from dltop.errors import DltopError
from dltop.jobs import environment, lease, rundir
from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.collector import IterationCollector, run_fields
from dltop.jobs.cooldown import cool_down
from dltop.jobs.events import (
    CampaignFinished,
    CampaignStarted,
    DevicesBusy,
    EngineEvent,
    NoDeviceLease,
    RunFinished,
    RunStarted,
)
from dltop.jobs.foreign import most_sharing
from dltop.jobs.queued import QueuedJob
from dltop.jobs.slurm import agent_ingestion, supervise_slurm
from dltop.jobs.slurm_script import SlurmFiles
from dltop.jobs.supervisor import supervise
from dltop.jobs.writes import RunWrites, join_notes
from dltop.procs import process_start_time
from dltop.profiles.model import JobSpec
from dltop.runners import command, registry
from dltop.store import guard
from dltop.store.guard import StorageError
from dltop.store.writer import Store, utc_now
from dltop.telemetry.sampler import Batch, Sampler

P = ParamSpec("P")
T = TypeVar("T")

CONTROL_POLL_S = 0.5
"""How often the engine reads pause/resume/cancel requests from the database."""


class Engine:
    """Runs one campaign's queued jobs, writing runs, iterations and environment.

    One run at a time unless the allocator packs (then runs on disjoint devices
    go at once, each job in its own task).
    """

    def __init__(self, store: Store, campaign_id: int, name: str, jobs: list[QueuedJob],
                 *, logs_dir: Path, db_label: str,
                 on_event: Callable[[EngineEvent], None] = lambda e: None,
                 sampler_factory: Callable[[Callable[[Batch], None]], Sampler] | None = None,
                 allocator: DeviceAllocator | None = None,
                 lease_dir: Path | None = None,
                 ) -> None:
        self._store = store
        self._campaign_id = campaign_id
        self._name = name
        self._jobs = jobs
        self._logs_dir = logs_dir
        self._db_label = db_label
        self._emit = on_event
        self._stop = asyncio.Event()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dltop-writer")
        self.counts: dict[str, int] = {}
        self._ran_one = False
        self._running = asyncio.Event()  # cleared while the campaign is paused
        self._running.set()
        self._sampler = sampler_factory(self._submit_batch) if sampler_factory else None
        self._alloc = allocator or DeviceAllocator(0, environment.core_order(), pack=False)
        self._run_stops: dict[int, asyncio.Event] = {}  # run id -> cancels that run only
        self._claimed: set[int] = set()  # job ids a task holds (queued until it starts)
        self._wake = asyncio.Event()  # a job task ended or a stop was requested
        self._lease_dir = lease_dir  # None: lease.lock_dir()
        self._leases: dict[int, lease.DeviceLease] = {}  # allocator token -> its locks
        self._warned_lease = False
        self._failure: StorageError | None = None  # the database failed for good
        self.telemetry_batches_lost = 0

    def request_stop(self) -> None:
        """Cancel the current runs and stop the queue (safe to call more than once)."""
        self._stop.set()
        for ev in self._run_stops.values():
            ev.set()
        self._running.set()
        self._wake.set()

    async def run(self) -> str:
        """Run every queued job; return the campaign's final status."""
        if self._sampler is not None:
            self._sampler.start()
        try:
            watcher: asyncio.Task[None] | None = None
            try:
                await self._write(self._store.set_campaign_status, self._campaign_id,
                                  CampaignStatus.RUNNING)
                self._emit(CampaignStarted(self._campaign_id, self._name, len(self._jobs),
                                           self._db_label))
                watcher = asyncio.create_task(self._watch_control())
                status = await self._drain_queue()
            except StorageError as exc:
                self._failure = self._failure or exc
                status = CampaignStatus.FAILED
            finally:
                if watcher is not None:
                    watcher.cancel()
            if self._failure is not None:
                await self._record_failure(self._failure)
            else:
                await self._checkpoint(truncate=True)
            self._emit(CampaignFinished(self._campaign_id, status, dict(self.counts)))
            if self._failure is not None:
                raise StorageError(
                    f"campaign {self._campaign_id} stopped: {self._failure}; finished runs are "
                    "stored, 'dltop run --resume' continues it once that is fixed")
            return status
        finally:
            if self._sampler is not None:
                await asyncio.to_thread(self._sampler.stop)
            self._writer.shutdown(wait=True)

    async def _drain_queue(self) -> str:
        """Start queued jobs as devices allow, taken from the database, until none is left.

        Taking each job from the database lets a viewer reorder, remove or add
        jobs while the campaign runs.
        """
        queue, cid = self._store.queue, self._campaign_id
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self._wait_while_paused(tasks)
                if self._stop.is_set():
                    await self._settle(tasks)
                    if self._failure is not None:
                        return CampaignStatus.FAILED  # the queue is kept for --resume
                    n = await self._write(queue.cancel_queued, cid)
                    self.counts[RunStatus.CANCELLED] = self.counts.get(RunStatus.CANCELLED, 0) + n
                    status = CampaignStatus.CANCELLED
                else:
                    started = await self._start_next(tasks)
                    if started or tasks:
                        if not started:
                            await self._wait_for_change()
                        finished = [t for t in tasks if t.done()]
                        tasks.difference_update(finished)
                        await self._settle(finished)
                        continue
                    status = CampaignStatus.FINISHED
                if await self._write(queue.finish_if_drained, cid, status, utc_now()):
                    return status
        finally:
            for t in tasks:
                t.cancel()

    async def _settle(self, tasks: set[asyncio.Task[None]] | list[asyncio.Task[None]]) -> None:
        """Wait for job tasks; a storage error stops the campaign, any other error is raised.

        A bug in a job task must not pass silently; a database that fails for good
        (disk full, malformed) ends the current runs and the campaign as ``failed``.
        """
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, StorageError):
                if self._failure is None:
                    self._failure = result
                self.request_stop()
            elif isinstance(result, BaseException):
                raise result

    async def _record_failure(self, exc: StorageError) -> None:
        # Best effort: the database that failed may refuse this too (the line says it all).
        with contextlib.suppress(StorageError):
            await self._write(self._store.fail_campaign, self._campaign_id, str(exc))

    async def _checkpoint(self, truncate: bool = False) -> None:
        # Best effort: a checkpoint that fails leaves the rows in the -wal file, not lost.
        with contextlib.suppress(StorageError):
            await self._write(self._store.checkpoint, truncate=truncate)

    async def _start_next(self, tasks: set[asyncio.Task[None]]) -> bool:
        """Start the first queued job whose devices are free; False if none could start."""
        queue, cid = self._store.queue, self._campaign_id
        # The first queued job that fits (when packing, later jobs fill free devices;
        # otherwise the first one always fits an idle host): the allocator's room is
        # the query's filter, so the database returns that job and nothing before it.
        skip = set(self._claimed)
        while (room := self._alloc.room()) is not None:
            found = await self._write(queue.next_startable, cid, room.gpus, room.cpus, skip)
            if found is None:
                return False
            job_id, pos, device = found
            skip.add(job_id)
            got = self._alloc.try_allocate(device)
            if got is None:  # the room said it fits: a job row unlike its device label
                continue
            spec = await self._write(queue.queued_spec, job_id)
            if spec is None:  # a viewer removed it since the query
                self._alloc.release(got[0])
                continue
            self._claimed.add(job_id)
            tasks.add(asyncio.create_task(self._job_task(QueuedJob(job_id, pos, spec), *got)))
            return True
        return False

    async def _wait_for_change(self) -> None:
        """Sleep until a job task ends, a stop is asked, or a poll interval passes.

        The interval bounds how late a job appended or reordered by a viewer, or
        a pause, is noticed while runs are going on.
        """
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=CONTROL_POLL_S)

    async def _job_task(self, q: QueuedJob, token: int, alloc: Allocation) -> None:
        """Run a job (and its retries after a crash) on its devices, then free them."""
        held = self._leases[token] = self._lease(alloc, q.spec)
        try:
            # Stopped while waiting: the job is still queued and cancel_queued takes it.
            if not await lease.wait_for(held, self._stop, self._devices_busy):
                return
            await self._write(self._store.queue.set_waiting, self._campaign_id, None)
            if not self._running.is_set():
                return  # paused while it waited for its devices: still queued, for the resume
            if held.unavailable is not None and not self._warned_lease:
                self._warned_lease = True
                self._emit(NoDeviceLease(self._campaign_id, held.unavailable))
            result = await self._run_job(q, alloc, token)
            tries = 1
            while (result == RunStatus.CRASHED and tries <= q.spec.retries
                   and not self._stop.is_set()):
                tries += 1
                result = await self._run_job(q, alloc, token)
        finally:
            self._leases.pop(token).release()
            self._alloc.release(token)
            self._claimed.discard(q.job_id)
            self._wake.set()

    def _lease(self, alloc: Allocation, job: JobSpec) -> lease.DeviceLease:
        # A Slurm job's devices are the cluster's to hand out: it leases none here.
        names = () if job.executor == "slurm" else lease.run_devices(alloc, self._alloc)
        return lease.DeviceLease(names,
                                 {"campaign": self._campaign_id, "name": self._name,
                                  "db": self._db_label}, self._lease_dir)

    async def _devices_busy(self, what: str) -> None:
        # The campaign shows `waiting` only while none of its runs goes on.
        if all(not x.complete for x in self._leases.values()):
            await self._write(self._store.queue.set_waiting, self._campaign_id, what)
        self._emit(DevicesBusy(self._campaign_id, what))

    async def _watch_control(self) -> None:
        try:
            await self._poll_control()
        except StorageError as exc:
            # Pause and cancel no longer reach the engine: stop loudly, not silently.
            self._failure = self._failure or exc
            self.request_stop()

    async def _poll_control(self) -> None:
        while True:
            cancel_id = await self._write(self._store.queue.take_cancel_run,
                                          self._campaign_id)
            if cancel_id is not None and cancel_id in self._run_stops:
                self._run_stops[cancel_id].set()
            # control_of reads a legacy 'run' as RESUME; no request means run too.
            ctl = control_of(await self._write(self._store.queue.control, self._campaign_id))
            if ctl is Control.CANCEL:
                self.request_stop()
            elif ctl is Control.PAUSE:
                self._running.clear()
            else:
                self._running.set()
            await asyncio.sleep(CONTROL_POLL_S)

    async def _wait_while_paused(self, tasks: set[asyncio.Task[None]]) -> None:
        # The runs going on finish first, and only then is the campaign `paused`: a viewer
        # shows "pausing after run N" until then, not `paused` over a run still going.
        while tasks and not (self._running.is_set() or self._stop.is_set()):
            await self._wait_for_change()
            finished = [t for t in tasks if t.done()]
            tasks.difference_update(finished)
            await self._settle(finished)
        if self._running.is_set() or self._stop.is_set():
            return
        await self._write(self._store.set_campaign_status, self._campaign_id,
                          CampaignStatus.PAUSED)
        await self._running.wait()
        await self._write(self._store.set_campaign_status, self._campaign_id,
                          CampaignStatus.RUNNING)

    def _count(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1

    async def _write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._writer, lambda: guard.call(self._db_label, fn, *args, **kwargs))

    def _submit_batch(self, batch: Batch) -> None:
        # Called from the sampler thread; the single writer orders it with the rest.
        self._writer.submit(self._write_batch, batch)

    def _write_batch(self, batch: Batch) -> None:
        try:
            guard.call(self._db_label, self._store.telemetry.write_batch, batch)
        except Exception:  # lost samples are counted; they never end the engine
            self.telemetry_batches_lost += 1

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
                                   "", job.samples_per_iter)
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
        collector.flush()
        outcome = collector.short(outcome)
        await writes.settled()
        fields = run_fields(outcome, collector)
        fields["note"] = join_notes(fields.get("note"), writes.note())
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
        if outcome.hello:
            gpus = [] if sampler is None else [sampler.backend.static(i) for i in alloc.gpu_indices]
            await self._write(self._store.record_environment, run_id,
                              environment.environment_row(outcome.hello, env, job, gpus,
                                                          facts))
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
                                       attempt, "", q.spec.samples_per_iter)
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


def default_logs_dir(db_path: Path) -> Path:
    """Per-run logs live beside the database: ``<db dir>/<db stem>-runs/``."""
    return rundir.runs_dir_of(db_path)

