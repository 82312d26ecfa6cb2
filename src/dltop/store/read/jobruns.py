"""Runs with their jobs' columns: listings, the runs in progress, and results' run rows.

A database an older dltop wrote, opened read-only, lacks the later ``runs`` columns:
each reads as null here (``runs.note`` 13, ``plan_iterations`` 14, ``slurm_*`` 15,
``queue_s`` 22...).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from dltop.catalog import RunStatus
from dltop.store.archive import ARCHIVE
from dltop.store.read.jobs import JOB_COLS
from dltop.store.read.queue_view import run_total
from dltop.store.read.runs import marks
from dltop.store.read.schema import columns, has_table
from dltop.store.read.slurm import queue_columns


def _run_cols(db: Any, names: Sequence[str]) -> str:
    """``r.name as name`` of each of ``names``, ``null as name`` where ``runs`` lacks it."""
    have = columns(db, "runs")
    return ", ".join(f"r.{n} as {n}" if n in have else f"null as {n}" for n in names)


def recent_runs(db: Any, limit: int, campaign_id: int | None,
                statuses: Sequence[str]) -> list[dict[str, Any]]:
    """Runs, newest first, with their job's columns, optionally of one campaign and of
    some statuses only; ``samples_per_s`` as exports define it (total samples over total
    seconds; a database written before it stored batch / median)."""
    conds: list[str] = []
    params: list[Any] = []
    if campaign_id is not None:
        conds.append("r.campaign_id = ?")
        params.append(campaign_id)
    if statuses:
        conds.append(f"r.status in ({marks(statuses)})")
        params += list(statuses)
    where = ("where " + " and ".join(conds)) if conds else ""
    cols = _run_cols(db, ("note", "queue_s"))
    return list(db.query(
        "select r.id as run_id, r.campaign_id, r.job_id, r.attempt, r.started_at, r.status, "
        "j.framework, j.model, j.batch_size, j.device, j.repeat, r.median_s, r.n_iterations, "
        "coalesce(r.samples_per_iter / nullif(r.mean_s, 0), r.samples_per_s) "
        f"as samples_per_s, r.cv, r.noisy, r.error_message, r.wall_s, {cols}, "
        f"{queue_columns(db)} "
        f"from runs r join jobs j on j.id = r.job_id {where} order by r.id desc limit ?",
        [*params, limit]))


def running(db: Any, campaign_id: int) -> list[dict[str, Any]]:
    """Runs of the campaign stored as ``running``, oldest first, with their job's columns,
    ``total`` (:func:`~dltop.store.read.queue_view.run_total`), the executor's queue columns
    (:func:`~dltop.store.read.slurm.queue_columns`), ``queue_s`` and where it runs
    (``gpu_indices``, ``cpu_affinity``, ``slurm_nodes``)."""
    return list(db.query(
        "select r.id, r.job_id, r.started_at, r.log_path, r.samples_per_iter, j.framework, "
        "j.model, j.batch_size, j.device, j.repeat, j.iterations, j.warmup, "
        f"{run_total(db)}, {queue_columns(db)}, "
        f"{_run_cols(db, ['queue_s', 'gpu_indices', 'cpu_affinity', 'slurm_nodes'])} "
        "from runs r join jobs j on j.id = r.job_id "
        "where r.campaign_id = ? and r.status = ? order by r.id",
        [campaign_id, RunStatus.RUNNING]))


def latest_run_rows(db: Any, campaign_id: int, fields: Sequence[str]) -> list[dict[str, Any]]:
    """One row per job of the campaign that has a run: its latest run's ``fields`` (null
    where this database lacks them) and results' columns, read through the runs'
    campaign index."""
    run_cols = _run_cols(db, fields)
    return list(db.query(f"""
        select j.id as job_id, j.position, j.status as job_status, 1 as jobs, {JOB_COLS},
               r.id as run_id, r.status, r.noisy, r.samples_per_iter, r.concurrent_runs,
               r.contaminated, r.telemetry_simulated, r.n_iterations,
               j.iterations as asked_iterations, e.python_executable,
               c.dltop_version as campaign_dltop_version, {run_cols}
        from latest_runs r
        join jobs j on j.id = r.job_id join job_specs s on s.job_id = j.id
        join campaigns c on c.id = j.campaign_id
        left join environment e on e.run_id = r.id
        where r.campaign_id = ? and +j.campaign_id = ?
    """, [campaign_id, campaign_id]))


def measured_iterations(db: Any, run_ids: Sequence[int]) -> Iterator[tuple[int, float, Any]]:
    """(run id, seconds, samples) of the runs' measured iterations, by run and index:
    plain tuples (400 000 iterations are read in 0.3 s, not 2 s as dicts)."""
    return iter(db.execute(
        "select i.run_id, i.seconds, coalesce(i.samples, r.samples_per_iter, 0) "
        f"from iterations i join runs r on r.id = i.run_id where i.run_id in "
        f"({marks(run_ids)}) and coalesce(i.warmup, 0) = 0 and i.seconds is not null "
        "order by i.run_id, i.idx", list(run_ids)))


def archived(db: Any, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """What ``dltop prune`` kept of the pruned runs among ``run_ids``
    (:mod:`dltop.store.retention`): ``run_id``, ``measured_seconds``,
    ``measured_samples``, ``tree_cpu_all_pct``."""
    if not run_ids or not has_table(db, ARCHIVE):
        return []
    return list(db.query(
        "select run_id, measured_seconds, measured_samples, tree_cpu_all_pct "
        f"from {ARCHIVE} where run_id in ({marks(run_ids)})", list(run_ids)))
