"""A started campaign's engine in this process (``dltop run`` without ``--detach``)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace

from dltop.catalog import FAILURE_STATUSES, RunStatus
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

STOP_REASONS: dict[signal.Signals, str] = {
    signal.SIGINT: "cancelled by Ctrl-C (SIGINT)",
    signal.SIGTERM: "stopped by SIGTERM (a shutdown, a batch system or kill)",
    signal.SIGHUP: "stopped by SIGHUP (the terminal closed)",
}
"""What each signal that stops ``dltop run`` is stored and printed as: only Ctrl-C is
the user's own cancel (``dltop cancel`` is engine.USER_CANCEL)."""


@dataclass(frozen=True)
class Outcome:
    """How the campaign's engine ended: the campaign's status, whether a job failed
    (crashed, timed out, diverged...) or ended ``short``, the telemetry the database
    refused, and what stopped it."""

    campaign_id: int
    status: str
    failed_runs: bool
    telemetry_loss: TelemetryLoss
    short_runs: bool = False
    stop_reason: str | None = None
    stop_signal: signal.Signals | None = None
    """The signal that stopped it (None: it ended, or ``dltop cancel`` did)."""


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

    SIGINT, SIGTERM and SIGHUP stop it as ``dltop cancel`` does, each stored as what
    it is (:data:`STOP_REASONS`). A failure or a ``short`` job counts whether this
    engine or an earlier one (before ``--resume``) ran it.
    """
    store, opts, backend, campaign_id = (handle.store, handle.options, handle.backend,
                                         handle.campaign_id)
    assert store is not None and campaign_id is not None, "stored here, or taken over"
    engine = Engine(store, campaign_id, handle.name, logs_dir=runs_dir_of(handle.db_path),
                    db_label=str(handle.db_path), on_event=on_event,
                    sampler_factory=None if backend is None else (
                        lambda on_batch: Sampler(backend, on_batch, opts.gpu_hz, opts.host_hz)),
                    allocator=DeviceAllocator(gpu_count(), core_order(), pack=handle.pack))

    caught: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        caught.append(sig)
        engine.request_stop(STOP_REASONS[sig])

    async def go() -> str:
        loop = asyncio.get_running_loop()
        for sig in STOP_REASONS:
            loop.add_signal_handler(sig, stop, sig)
        return await engine.run()

    status = asyncio.run(go())
    both = (engine.counts, engine.totals)  # a retried crash is not in the job's status
    # the signal whose stop it was (none when a dltop cancel came first)
    by = next((c for c in caught if STOP_REASONS[c] == engine.stop_reason), None)
    return Outcome(
        campaign_id, status, any(c.get(s, 0) for c in both for s in FAILURE_STATUSES),
        engine.telemetry_loss, short_runs=any(c.get(RunStatus.SHORT, 0) for c in both),
        stop_reason=engine.stop_reason, stop_signal=by)
