"""What a viewer shows of the queue and the campaign: a window of its jobs, its runs in
progress, the sums its ETA is computed from, its counts (live/ and the exporter).

The queue may hold 100 000 jobs, so a read fetches one window of it (the rows the
viewer shows, plus a margin) and the counts, never the whole list: every query
here is an index search or an index-only count (``jobs(campaign_id, position)``,
and ``jobs(campaign_id, status, position)`` for the counts and removed jobs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.catalog import RESULT_STATUSES, JobStatus, RunStatus
from dltop.store.read.runs import marks
from dltop.store.read.schema import columns

_RESULTS = ", ".join(f"'{s}'" for s in sorted(RESULT_STATUSES))
_JOB_COLUMNS = (
    "select id, position, status, framework, model, batch_size, device, repeat, "
    "case when status = 'running' then (select r.id from latest_runs r "
    "where r.job_id = jobs.id) end as run_id, "
    # A job queued or running again (retried, re-queued by resume) shows no figure of
    # its previous run: that median is not what it is measuring now; nor does a job
    # whose run was stopped (cancelled, timed out...): its median is a partial one.
    f"case when status in ({_RESULTS}) then "
    "(select r.median_s from latest_runs r where r.job_id = jobs.id) end "
    "as median_s, case when status in ('queued', 'running') then 0 else "
    "(select r.contaminated from latest_runs r where r.job_id = jobs.id) end "
    "as contaminated from jobs ")
_CONFIG = "j.framework, j.model, j.batch_size, j.device"


def run_total(db: Any) -> str:
    """SQL of a run's total steps as ``total`` (runs ``r`` joined to jobs ``j``): the
    runner's plan when it sent one (an ``epochs`` run knows its steps only once it loaded
    its data), else the job's; a database from before migration 14 has no plan column."""
    return ("coalesce(r.plan_iterations, j.iterations + j.warmup) as total"
            if "plan_iterations" in columns(db, "runs") else "j.iterations + j.warmup as total")


def recent_iterations(db: Any, run_id: int, limit: int) -> list[dict[str, Any]]:
    """The run's newest ``limit`` iterations, newest first."""
    return list(db.query("select idx, seconds, warmup, loss, t_wall_s from iterations "
                         "where run_id = ? order by idx desc limit ?", [run_id, limit]))


def _count(db: Any, sql: str, params: list[object]) -> int:
    return int(next(db.query("select count(*) as n from jobs where campaign_id = ?" + sql,
                             params))["n"])


def queue_row(db: Any, campaign_id: int, position: int) -> int:
    """Row of the job at ``position`` in the queue a viewer shows (removed jobs left out)."""
    return (_count(db, " and position < ?", [campaign_id, position])
            - _count(db, " and status = ? and position < ?",
                     [campaign_id, JobStatus.REMOVED, position]))


def job_row(db: Any, job_id: int) -> int | None:
    """The job's row in its campaign's queue (None: no such job)."""
    hit = next(db.query("select campaign_id, position from jobs where id = ?", [job_id]), None)
    return None if hit is None else queue_row(db, hit["campaign_id"], hit["position"])


def _position_at(db: Any, campaign_id: int, row: int, total_hint: int | None = None
                 ) -> int | None:
    """Position of the job on ``row`` of the queue (None past its end).

    ``OFFSET`` over ``status != 'removed'`` would read every skipped row from the
    table (30 ms at 100 000 jobs); an offset over the position index alone reads no
    table row, so it is taken there and corrected for the removed jobs it passed.
    Rows in the queue's second half (by ``total_hint``, the rows last counted) are
    counted from its end, which reads half as much of the index.
    """
    n, from_end = row, False
    if total_hint is not None and row >= total_hint // 2:
        shown = _count(db, "", [campaign_id]) - _count(db, " and status = ?",
                                                        [campaign_id, JobStatus.REMOVED])
        if row >= shown:
            return None
        n, from_end = shown - 1 - row, True
    order, upto = ("desc", ">=") if from_end else ("", "<=")
    raw = n
    while True:
        hit = next(db.query(f"select position from jobs where campaign_id = ? order by "
                            f"position {order} limit 1 offset ?", [campaign_id, raw]), None)
        if hit is None:
            return None
        passed = _count(db, f" and status = ? and position {upto} ?",
                        [campaign_id, JobStatus.REMOVED, hit["position"]])
        shown = raw + 1 - passed  # rows shown from that end up to this one
        if shown > n:
            return int(hit["position"])
        raw += n + 1 - shown  # at least one more: the removed rows passed on the way


def queue_window(db: Any, campaign_id: int, offset: int, limit: int,
                 total_hint: int | None = None) -> list[dict[str, Any]]:
    """Rows ``offset`` to ``offset + limit`` of the queue (``total_hint``: its rows as
    last counted, which only picks the end to count from), with the running job's
    ``run_id`` and the latest run's ``median_s`` and ``contaminated``."""
    first = _position_at(db, campaign_id, max(0, offset), total_hint)
    if first is None:
        return []
    return list(db.query(_JOB_COLUMNS + "where campaign_id = ? and status != ? and "
                         "position >= ? order by position limit ?",
                         [campaign_id, JobStatus.REMOVED, first, limit]))


def finished_pace(db: Any, campaign_id: int, statuses: Sequence[str]) -> list[dict[str, Any]]:
    """By configuration, the ``runs`` of ``statuses`` that ran: ``iters``, ``wall`` and
    ``measured`` seconds."""
    return list(db.query(
        f"select {_CONFIG}, count(*) as runs, sum(r.n_iterations + j.warmup) as iters, "
        "sum((julianday(r.finished_at) - julianday(r.started_at)) * 86400.0) as wall, "
        "sum(r.n_iterations * r.mean_s) as measured "
        "from runs r join jobs j on j.id = r.job_id where r.campaign_id = ? "
        f"and r.status in ({marks(statuses)}) "
        "and r.finished_at is not null and r.started_at is not null "
        f"and r.n_iterations > 0 group by {_CONFIG}", [campaign_id, *statuses]))


def queued_work(db: Any, campaign_id: int) -> list[dict[str, Any]]:
    """By configuration, the queued ``jobs`` and their ``iters`` (warm-up included)."""
    return list(db.query(
        f"select {_CONFIG}, count(*) as jobs, sum(j.iterations + j.warmup) as iters "
        f"from jobs j where j.campaign_id = ? and j.status = ? group by {_CONFIG}",
        [campaign_id, JobStatus.QUEUED]))


def identity_marks(db: Any, campaign_id: int) -> tuple[Any, ...]:
    """What its identity labels depend on: jobs added or removed, runs started or ended
    (a run's interpreter is known once it reports its environment)."""
    jobs = next(db.query("select count(*) as n, max(id) as last from jobs "
                         "where campaign_id = ?", [campaign_id]))
    runs = next(db.query("select count(*) as n, max(id) as last, sum(status != ?) as ended "
                         "from runs where campaign_id = ?", [RunStatus.RUNNING, campaign_id]))
    return (jobs["n"], jobs["last"], runs["n"], runs["last"], runs["ended"])


def ended_run_counts(db: Any, campaign_id: int) -> dict[str, int]:
    """The campaign's runs that ended, by status (retries count each attempt)."""
    return {r["status"]: int(r["n"]) for r in db.query(
        "select status, count(*) as n from runs where campaign_id = ? and status != ? "
        "group by status", [campaign_id, RunStatus.RUNNING])}


def last_ended_run(db: Any, campaign_id: int) -> dict[str, Any] | None:
    """The campaign's newest ended run, its figures and its job's identity."""
    return next(db.query(
        "select r.id, r.status, r.median_s, r.mean_s, r.samples_per_iter, r.samples_per_s, "
        "j.id as job_id, j.framework, j.model, j.batch_size, j.device from runs r "
        "join jobs j on j.id = r.job_id where r.campaign_id = ? and r.status != ? "
        "order by r.id desc limit 1", [campaign_id, RunStatus.RUNNING]), None)
