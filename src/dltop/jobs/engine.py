"""The engine: runs a campaign's queued jobs and stores everything.

Jobs run one at a time by default; with packing, the
:class:`~dltop.jobs.allocator.DeviceAllocator` lets runs on disjoint devices go
at once, and Slurm jobs go up to ``slurm.parallel`` at once. Each run first takes the
host-wide lease of its devices (:mod:`dltop.jobs.lease`; the whole host when the
campaign does not pack), so another engine on the host waits rather than running
beside it.

It owns one writer thread (a single-worker executor holding the
:class:`~dltop.store.Store`), so SQLite never blocks the event loop and there is
one write connection. Children are started only through
:func:`dltop.jobs.supervisor.supervise` (or, for Slurm jobs,
:func:`dltop.jobs.executors.slurm.supervise_slurm`), chosen by the run's
:mod:`executor <dltop.jobs.executors>`; one run's life is a
:class:`~dltop.jobs.runjob.RunLifecycle` the engine holds, not a base class.

Its store is fenced on the campaign (:mod:`dltop.store.fence`): once another engine
took the campaign over (this one was frozen past the heartbeat's limit), every write
is refused with :class:`~dltop.store.fence.OwnershipLost`. The first refusal, often
the heartbeat's, stops the engine like a failed database does: its runs are stopped
(their runners killed, Slurm jobs cancelled: the new owner re-ran or kept them), and
it writes nothing more, not even the campaign's ``failed``, and raises the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

from dltop.catalog import CampaignStatus, Control, RunStatus, control_of
from dltop.jobs import environment, lease
from dltop.jobs.allocator import Allocation, DeviceAllocator
from dltop.jobs.events import (
    CampaignFinished,
    CampaignStarted,
    DevicesBusy,
    EngineEvent,
    NoDeviceLease,
)
from dltop.jobs.executors.pick import for_job
from dltop.jobs.executors.where import on_this_host
from dltop.jobs.queued import QueuedJob
from dltop.jobs.runjob import RunLifecycle
from dltop.jobs.writes import TelemetryLoss
from dltop.procs import HEARTBEAT_S, this_host
from dltop.store import guard
from dltop.store.fence import OwnershipLost
from dltop.store.guard import StorageError
from dltop.store.read.jobs import status_counts
from dltop.store.rows import utc_now
from dltop.store.writer import Store
from dltop.telemetry.sampler import Sampler
from dltop.telemetry.windows import Batch

P = ParamSpec("P")
T = TypeVar("T")

CONTROL_POLL_S = 0.5
"""How often the engine reads pause/resume/cancel requests from the database."""
USER_CANCEL = "cancelled by the user ('dltop cancel' or the viewer)"
"""The stop reason of a campaign cancelled through the database."""


class Engine:
    """Runs one campaign's queued jobs, writing runs, iterations and environment.

    One run at a time unless the allocator packs (then runs on disjoint devices
    go at once, each job in its own task). The queue stays in the database: the
    engine holds only the jobs it runs, each read when it starts, so its memory and
    start-up do not grow with the queue's length.
    """

    def __init__(self, store: Store, campaign_id: int, name: str, *,
                 logs_dir: Path, db_label: str,
                 on_event: Callable[[EngineEvent], None] = lambda e: None,
                 sampler_factory: Callable[[Callable[[Batch], None]], Sampler] | None = None,
                 allocator: DeviceAllocator | None = None,
                 lease_dir: Path | None = None,
                 ) -> None:
        self._store = store
        self._campaign_id = campaign_id
        self._name = name
        self._logs_dir = logs_dir
        self._db_label = db_label
        self._emit = on_event
        self._stop = asyncio.Event()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dltop-writer")
        self.counts: dict[str, int] = {}
        """This engine's runs by final status (and the queued jobs its stop cancelled)."""
        self.totals: dict[str, int] = {}
        """The campaign's jobs by status at its end, runs of earlier engines included."""
        self.stop_reason: str | None = None
        """What stopped the campaign (a signal, ``dltop cancel``), None until stopped."""
        self._running = asyncio.Event()  # cleared while the campaign is paused
        self._running.set()
        self._sampler = sampler_factory(self._submit_batch) if sampler_factory else None
        self._alloc = allocator or DeviceAllocator(0, environment.core_order(), pack=False)
        self._claimed: set[int] = set()  # job ids a task holds (queued until it starts)
        self._wake = asyncio.Event()  # a job task ended or a stop was requested
        self._lease_dir = lease_dir  # None: lease.lock_dir()
        self._leases: dict[int, lease.DeviceLease] = {}  # allocator token -> its locks
        self._warned_lease = False
        self._failure: StorageError | None = None  # the database failed for good
        self.telemetry_loss = TelemetryLoss()  # counted per run, said in its note
        self._runs = RunLifecycle(
            store=store, campaign_id=campaign_id, logs_dir=logs_dir, write=self._write,
            writer=self._writer, db_label=db_label, emit=on_event, stop=self._stop,
            counts=self.counts, sampler=self._sampler, allocator=self._alloc,
            leases=self._leases, telemetry_loss=self.telemetry_loss,
            failure=lambda: self._failure)

    def request_stop(self, reason: str | None = None) -> None:
        """Cancel the current runs and stop the queue (safe to call more than once).

        Args:
            reason: what stopped it, stored as its cancelled runs' message and the
                campaign's (``stopped by SIGTERM``); the first one given is kept.
        """
        if reason is not None and self.stop_reason is None:
            self.stop_reason = self._runs.stop_reason = reason
        self._stop.set()
        for ev in self._runs.run_stops.values():
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
                queued = await self._write(self._store.queue.queued_count, self._campaign_id)
                self._emit(CampaignStarted(self._campaign_id, self._name, queued,
                                           self._db_label))
                watcher = asyncio.create_task(self._watch_control())
                status = await self._drain_queue()
            except StorageError as exc:
                self._fail(exc)
                status = CampaignStatus.FAILED
            finally:
                if watcher is not None:
                    watcher.cancel()
            if isinstance(self._failure, OwnershipLost):
                pass  # the campaign is the new owner's: nothing more is written
            elif self._failure is not None:
                await self._record_failure(self._failure)
            else:
                await self._runs.checkpoint(truncate=True)
            with contextlib.suppress(StorageError):  # else the line says this engine's
                self.totals = await self._write(status_counts, self._store.db,
                                                self._campaign_id)
            self._emit(CampaignFinished(self._campaign_id, status,
                                        dict(self.totals or self.counts), dict(self.counts)))
            if isinstance(self._failure, OwnershipLost):
                raise self._failure
            if self._failure is not None:
                raise StorageError(
                    f"campaign {self._campaign_id} stopped: {self._failure}; finished runs are "
                    "stored, 'dltop run --resume' continues it once that is fixed")
            return status
        finally:
            await self._runs.servers.close()
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
                if await self._write(queue.finish_if_drained, cid, status, utc_now(),
                                     self.stop_reason):
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
                self._fail(result)
            elif isinstance(result, BaseException):
                raise result

    def _fail(self, exc: StorageError) -> None:
        """Stop the campaign for ``exc``: the first failure is kept, unless this one says
        the campaign was taken over (then nothing more may be written, failure or not)."""
        if self._failure is None or isinstance(exc, OwnershipLost):
            self._failure = exc
        self.request_stop()

    async def _record_failure(self, exc: StorageError) -> None:
        # Best effort: the database that failed may refuse this too (the line says it all).
        with contextlib.suppress(StorageError):
            await self._write(self._store.fail_campaign, self._campaign_id, str(exc))

    async def _start_next(self, tasks: set[asyncio.Task[None]]) -> bool:
        """Start the first queued job whose devices are free; False if none could start.

        A job whose devices are not this host's (a Slurm job) takes one of its
        ``slurm.parallel`` slots instead: while only such runs go on, the next job in
        queue order starts if it is one and a slot is free (in order: a local job, or a
        Slurm job without a slot, waits, and nothing behind it starts).
        """
        queue, cid = self._store.queue, self._campaign_id
        # The first queued job that fits (when packing, later jobs fill free devices;
        # otherwise the first one always fits an idle host): the allocator's room is
        # the query's filter, so the database returns that job and nothing before it.
        skip = set(self._claimed)
        while True:
            room = self._alloc.room()
            if room is None and not self._alloc.remote_only:
                return False
            found = await self._write(queue.next_startable, cid,
                                      None if room is None else room.gpus,
                                      None if room is None else room.cpus, skip)
            if found is None:
                return False
            job_id, pos, device = found
            skip.add(job_id)
            spec = await self._write(queue.queued_spec, job_id)
            if spec is None:  # a viewer removed it since the query
                continue
            if on_this_host(spec):
                if room is None:
                    return False  # it has the host to itself once the Slurm jobs end
                got = self._alloc.try_allocate(device)
                if got is None:  # the room said it fits: a job row unlike its device label
                    continue
            else:
                got = self._alloc.try_allocate_remote(
                    spec.slurm.parallel if spec.slurm is not None else 1)
                if got is None:
                    return False  # every slot taken: it is next when one frees
            self._claimed.add(job_id)
            tasks.add(asyncio.create_task(self._job_task(QueuedJob(job_id, pos, spec), *got)))
            return True

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
        executor = for_job(q.spec)  # once: its retries run where it ran
        # A Slurm job's devices are the cluster's to hand out: it leases none here.
        held = self._leases[token] = lease.run_lease(
            executor.lease_names(alloc, self._alloc), alloc, self._alloc,
            {"campaign": self._campaign_id, "name": self._name, "db": self._db_label},
            self._lease_dir)
        try:
            # Stopped while waiting: the job is still queued and cancel_queued takes it.
            if not await lease.wait_for(held, self._stop,
                                        lambda what: self._devices_busy(what, held)):
                return
            alloc = self._alloc.rebind(token, held.bound(alloc))  # packed: any free devices
            await self._write(self._store.queue.set_waiting, self._campaign_id, None)
            if not self._running.is_set():
                return  # paused while it waited for its devices: still queued, for the resume
            if held.unavailable is not None and not self._warned_lease:
                self._warned_lease = True
                self._emit(NoDeviceLease(self._campaign_id, held.unavailable))
            result = await self._runs.run(q, alloc, token, executor)
            tries = 1
            while (result == RunStatus.CRASHED and tries <= q.spec.retries
                   and not self._stop.is_set()):
                tries += 1
                result = await self._runs.run(q, alloc, token, executor)
        finally:
            self._leases.pop(token).release()
            self._alloc.release(token)
            self._claimed.discard(q.job_id)
            self._wake.set()

    async def _devices_busy(self, what: str, held: lease.DeviceLease) -> None:
        # The campaign shows `waiting` only while none of its runs goes on.
        if all(not x.complete for x in self._leases.values()):
            await self._write(self._store.queue.set_waiting, self._campaign_id, what,
                              *held.waiting_facts())
        self._emit(DevicesBusy(self._campaign_id, what))

    async def _watch_control(self) -> None:
        try:
            await self._poll_control()
        except StorageError as exc:
            # Pause and cancel no longer reach the engine, or (OwnershipLost: its
            # heartbeat refused) another engine owns the campaign: stop, loudly.
            self._fail(exc)

    async def _poll_control(self) -> None:
        # The heartbeat rides on the control poll: both stop with the engine, so a
        # viewer on another host sees the engine die within HEARTBEAT_STALE_S. It is
        # fenced like every write: after a freeze, the first poll finds a takeover.
        pid, host, beat_at = os.getpid(), this_host(), 0.0
        while True:
            if time.monotonic() - beat_at >= HEARTBEAT_S:
                beat_at = time.monotonic()
                await self._write(self._store.queue.heartbeat, self._campaign_id, pid, host)
            cancel_id = await self._write(self._store.queue.take_cancel_run,
                                          self._campaign_id)
            if cancel_id is not None and cancel_id in self._runs.run_stops:
                self._runs.user_cancelled.add(cancel_id)
                self._runs.run_stops[cancel_id].set()
            # control_of reads a legacy 'run' as RESUME; no request means run too.
            ctl = control_of(await self._write(self._store.queue.control, self._campaign_id))
            if ctl is Control.CANCEL:
                self.request_stop(USER_CANCEL)
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
        except Exception as exc:  # lost samples are counted; they never end the engine
            self.telemetry_loss.add(batch, exc)
