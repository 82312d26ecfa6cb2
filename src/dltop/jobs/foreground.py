"""A started campaign's engine in this process (``dltop run`` without ``--detach``)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace

from dltop.catalog import FAILURE_STATUSES
from dltop.jobs.allocator import DeviceAllocator
from dltop.jobs.engine import Engine
from dltop.jobs.environment import core_order
from dltop.jobs.events import EngineEvent
from dltop.jobs.resume import Resumed, resume
from dltop.jobs.rundir import runs_dir_of
from dltop.jobs.start import CampaignHandle
from dltop.jobs.writes import TelemetryLoss
from dltop.telemetry import gpu_count
from dltop.telemetry.sampler import Sampler


@dataclass(frozen=True)
class Outcome:
    """How the campaign's engine ended: the campaign's status, whether a run failed
    (crashed, timed out, diverged...), and the telemetry the database refused."""

    campaign_id: int
    status: str
    failed_runs: bool
    telemetry_loss: TelemetryLoss


def take_over(handle: CampaignHandle) -> tuple[CampaignHandle, Resumed]:
    """Take over the unfinished campaign ``handle`` resumes: its orphans reaped, its
    interrupted runs queued again (:func:`dltop.jobs.resume.resume`).

    Raises:
        UserError: nothing to take over, or its engine is alive (nothing was written).
    """
    assert handle.store is not None and handle.options.resume
    resumed = resume(handle.store, handle.options.campaign_id)
    return replace(handle, campaign_id=resumed.campaign_id, name=resumed.name,
                   pack=resumed.pack, warnings=resumed.warnings), resumed


def run_here(handle: CampaignHandle, on_event: Callable[[EngineEvent], None]) -> Outcome:
    """Run the stored campaign of ``handle`` to its end in this process.

    SIGINT, SIGTERM and SIGHUP stop it as ``dltop cancel`` does.
    """
    store, opts, backend, campaign_id = (handle.store, handle.options, handle.backend,
                                         handle.campaign_id)
    assert store is not None and campaign_id is not None, "stored here, or taken over"
    engine = Engine(store, campaign_id, handle.name, logs_dir=runs_dir_of(handle.db_path),
                    db_label=str(handle.db_path), on_event=on_event,
                    sampler_factory=None if backend is None else (
                        lambda on_batch: Sampler(backend, on_batch, opts.gpu_hz, opts.host_hz)),
                    allocator=DeviceAllocator(gpu_count(), core_order(), pack=handle.pack))

    async def go() -> str:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, engine.request_stop)
        return await engine.run()

    status = asyncio.run(go())
    return Outcome(campaign_id, status, any(engine.counts.get(s, 0) for s in FAILURE_STATUSES),
                   engine.telemetry_loss)
