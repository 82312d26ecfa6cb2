"""What the campaign ETA is computed from: the finished runs' pace and the queued work.

Both are sums by configuration (framework, model, batch, device) read in SQL
(:mod:`dltop.store.read.queue_view`),
and both change only when a job changes status, so they are read again only
when the campaign's counts by status do: a queue of 100 000 jobs is summed once
per run, not twice a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dltop.catalog import RunStatus
from dltop.live.health import FinishedRate, PendingWork
from dltop.store.read.changes import main_file
from dltop.store.read.queue_view import finished_pace, queued_work

if TYPE_CHECKING:
    import sqlite_utils

ETA_STATUSES = (RunStatus.OK, RunStatus.SHORT)
"""Runs whose pace the campaign ETA is measured on (ran to their end)."""

_ETA_CACHE: dict[tuple[object, ...], tuple[tuple[FinishedRate, ...],
                                           tuple[PendingWork, ...]]] = {}


def eta_inputs(db: sqlite_utils.Database, campaign_id: int, counts: dict[str, int],
                ) -> tuple[tuple[FinishedRate, ...], tuple[PendingWork, ...]]:
    """The finished runs' pace and the queued jobs' iterations, by configuration
    (cached per database, campaign and counts by status)."""
    key = (main_file(db), id(db), campaign_id, tuple(sorted(counts.items())))
    hit = _ETA_CACHE.get(key)
    if hit is not None:
        return hit
    finished = tuple(
        FinishedRate((f["framework"], f["model"], f["batch_size"], f["device"]), f["runs"],
                     f["iters"], f["wall"], f["measured"] or 0.0)
        for f in finished_pace(db, campaign_id, ETA_STATUSES)
        if f["wall"] and f["iters"])  # a run that took no time (clock set back) says nothing
    pending = tuple(
        PendingWork((p["framework"], p["model"], p["batch_size"], p["device"]), p["jobs"],
                    p["iters"])
        for p in queued_work(db, campaign_id))
    if len(_ETA_CACHE) > 16:  # a viewer follows one campaign; tests open many databases
        _ETA_CACHE.clear()
    _ETA_CACHE[key] = (finished, pending)
    return finished, pending
