"""Jobs, their stored specs and identities, and each campaign's configurations.

Every job's ``config_key`` and ``spec_json`` come through the ``job_specs`` view (a row's
own, or its template's: :mod:`dltop.store.templates`); a campaign's configurations and
their job counts from ``job_configs`` (a temporary view over the jobs on a database
opened read-only before migration 20: :func:`dltop.store.views.ensure_views`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.catalog import JobStatus
from dltop.store.read.runs import in_chunks, marks


def status_counts(db: Any, campaign_id: int) -> dict[str, int]:
    """Jobs of a campaign by queue status."""
    return {r["status"]: r["n"] for r in db.query(
        "select status, count(*) as n from jobs where campaign_id = ? group by status",
        [campaign_id])}


def jobs_stamp(db: Any, campaign_id: int) -> tuple[int, int]:
    """A campaign's job count and largest job id: changes when a job is added or removed."""
    n, last = db.execute("select count(*), max(id) from jobs where campaign_id = ?",
                         [campaign_id]).fetchone()
    return int(n or 0), int(last or 0)


_REFERENCES = ("(instr(spec_json, '\"references\": [{') > 0 "
               "or instr(spec_json, '\"references\":[{') > 0)")
"""A spec that holds a performance reference (json.dumps spells it either way)."""


def reference_specs(db: Any, campaign_ids: Sequence[int]) -> list[str]:
    """One spec per configuration of ``campaign_ids`` that holds a performance reference."""
    return [r[0] for r in db.execute(
        f"select spec_json from job_configs where campaign_id in ({marks(campaign_ids)}) "
        f"and {_REFERENCES}", list(campaign_ids))]


def job_specs(db: Any, job_ids: Sequence[int]) -> list[dict[str, Any]]:
    """``id``, ``spec_json`` and ``config_key`` of the jobs ``job_ids``."""
    if not job_ids:
        return []
    return list(db.query("select job_id as id, spec_json, config_key from job_specs "
                         f"where job_id in ({marks(job_ids)})", list(job_ids)))


def campaign_specs(db: Any, campaign_id: int, *, ran: bool = False) -> list[dict[str, Any]]:
    """Every job of a campaign, queued or not (``ran``: those with a run, read through the
    runs' campaign index, never the queue), in queue order: ``id``, ``spec_json``,
    ``config_key`` and ``python_executable`` (its latest run's interpreter, or None)."""
    source = ("latest_runs r join jobs j on j.id = r.job_id" if ran else
              "jobs j left join latest_runs r on r.job_id = j.id")
    where = "r.campaign_id = ? and +j.campaign_id = ?" if ran else "j.campaign_id = ?"
    return list(db.query(
        f"select j.id, s.spec_json, s.config_key, e.python_executable from {source} "
        "join job_specs s on s.job_id = j.id left join environment e on e.run_id = r.id "
        f"where {where} order by j.position", [campaign_id] * (2 if ran else 1)))


def run_specs(db: Any, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Each run's ``spec_json`` (its job's) and ``python_executable`` (None before its
    environment is stored), by run id; read in chunks, so any number of runs."""
    out: dict[int, dict[str, Any]] = {}
    for chunk, chunk_marks in in_chunks(run_ids):
        for r in db.query(
                "select r.id, j.spec_json, e.python_executable from runs r join job_specs j "
                "on j.job_id = r.job_id left join environment e on e.run_id = r.id "
                f"where r.id in ({chunk_marks})", chunk):
            out[int(r["id"])] = r
    return out


def runs_jobs(db: Any, run_ids: Sequence[int]) -> list[tuple[int, int, int]]:
    """(run id, its job id, its campaign id) of each of ``run_ids``."""
    if not run_ids:
        return []
    return [(int(r[0]), int(r[1]), int(r[2])) for r in db.execute(
        "select r.id, r.job_id, j.campaign_id from runs r join jobs j on j.id = r.job_id "
        f"where r.id in ({marks(run_ids)})", list(run_ids))]


JOB_COLS = ("j.framework, j.model, j.batch_size, j.device, j.precision, s.config_key, "
            "s.spec_json, j.campaign_id, c.host as campaign_host")
"""The job columns of a results row (with its spec and its campaign's host)."""


def configurations(db: Any, campaign_id: int) -> list[dict[str, Any]]:
    """A campaign's configurations with their job count (``jobs``), the position of the
    first (``position``) and one job's columns (:data:`JOB_COLS`), no job row read."""
    return list(db.query(
        "select k.config_key, k.jobs, k.first_position as position, k.framework, k.model, "
        "k.batch_size, k.device, k.precision, k.spec_json, k.campaign_id, "
        "c.host as campaign_host from job_configs k join campaigns c on c.id = k.campaign_id "
        "where k.campaign_id = ?", [campaign_id]))


def never_run_not_queued(db: Any, campaign_id: int) -> list[dict[str, Any]]:
    """A campaign's jobs without a run and not queued (removed, unsatisfiable...), one row
    per configuration and status: ``position`` (the first's), ``job_status``, ``jobs``
    and :data:`JOB_COLS`. They are few: their ids come from the queue index on both sides
    of the queued ones, and no queued job's row is read."""
    return list(db.query(f"""
        select min(j.position) as position, j.status as job_status, count(*) as jobs,
               {JOB_COLS}
        from jobs j join job_specs s on s.job_id = j.id join campaigns c on c.id = j.campaign_id
        where j.id in (select id from jobs indexed by idx_jobs_queue
                       where campaign_id = ? and status < ?
                       union all select id from jobs indexed by idx_jobs_queue
                       where campaign_id = ? and status > ?)
          and not exists (select 1 from runs where job_id = j.id)
        group by s.config_key, j.status
    """, [campaign_id, JobStatus.QUEUED, campaign_id, JobStatus.QUEUED]))
