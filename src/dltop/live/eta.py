"""What the campaign ETA is computed from: the finished runs' pace and the queued work.

Both are sums by configuration (framework, model, batch, device) read in SQL,
and both change only when a job changes status, so they are read again only
when the campaign's counts by status do: a queue of 100 000 jobs is summed once
per run, not twice a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dltop.catalog import JobStatus, RunStatus
from dltop.live.health import FinishedRate, PendingWork

if TYPE_CHECKING:
    import sqlite_utils

ETA_STATUSES = (RunStatus.OK, RunStatus.SHORT)
"""Runs whose pace the campaign ETA is measured on (ran to their end)."""

_ETA_CACHE: dict[tuple[object, ...], tuple[tuple[FinishedRate, ...],
                                           tuple[PendingWork, ...]]] = {}
_CONFIG = "j.framework, j.model, j.batch_size, j.device"


def eta_inputs(db: sqlite_utils.Database, campaign_id: int, counts: dict[str, int],
                ) -> tuple[tuple[FinishedRate, ...], tuple[PendingWork, ...]]:
    """The finished runs' pace and the queued jobs' iterations, by configuration
    (cached per database, campaign and counts by status)."""
    file = next(db.query("pragma database_list"), {}).get("file", "")
    key = (file, id(db), campaign_id, tuple(sorted(counts.items())))
    hit = _ETA_CACHE.get(key)
    if hit is not None:
        return hit
    finished = tuple(
        FinishedRate((f["framework"], f["model"], f["batch_size"], f["device"]), f["runs"],
                     f["iters"], f["wall"], f["measured"] or 0.0)
        for f in db.query(
            f"select {_CONFIG}, count(*) as runs, sum(r.n_iterations + j.warmup) as iters, "
            "sum((julianday(r.finished_at) - julianday(r.started_at)) * 86400.0) as wall, "
            "sum(r.n_iterations * r.mean_s) as measured "
            "from runs r join jobs j on j.id = r.job_id where r.campaign_id = ? "
            f"and r.status in ({', '.join('?' * len(ETA_STATUSES))}) "
            "and r.finished_at is not null and r.started_at is not null "
            f"and r.n_iterations > 0 group by {_CONFIG}", [campaign_id, *ETA_STATUSES])
        if f["wall"] and f["iters"])  # a run that took no time (clock set back) says nothing
    pending = tuple(
        PendingWork((p["framework"], p["model"], p["batch_size"], p["device"]), p["jobs"],
                    p["iters"])
        for p in db.query(
            f"select {_CONFIG}, count(*) as jobs, sum(j.iterations + j.warmup) as iters "
            f"from jobs j where j.campaign_id = ? and j.status = ? group by {_CONFIG}",
            [campaign_id, JobStatus.QUEUED]))
    if len(_ETA_CACHE) > 16:  # a viewer follows one campaign; tests open many databases
        _ETA_CACHE.clear()
    _ETA_CACHE[key] = (finished, pending)
    return finished, pending
