"""The Slurm state of runs as stored: what their executor is asked whether it still
holds them in its queue, the run folder a resume adopts (one reader for live/ and the
executors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.read.runs import marks
from dltop.store.read.schema import columns
from dltop.store.schema_slurm import queue_columns_sql


def queue_columns(db: Any, alias: str = "r") -> str:
    """SQL of the columns a run's executor is asked about its queue by
    (:func:`dltop.jobs.executors.where.queued_reason`): ``executor``, ``slurm_job_id``,
    ``slurm_state``, ``slurm_reason``, with the fallbacks of older databases."""
    return queue_columns_sql(columns(db, "runs"), alias)


def queue_state(db: Any, run_ids: list[int]) -> list[dict[str, Any]]:
    """The runs' ``id`` and :func:`queue_columns`."""
    if not run_ids:
        return []
    return list(db.query(f"select r.id, {queue_columns(db)} from runs r "
                         f"where r.id in ({marks(run_ids)})", run_ids))


def log_and_spec(db: Any, run_id: int) -> tuple[str | None, str] | None:
    """The run's log path and its job's spec JSON (what a COMPLETED job is adopted
    from), None when there is no such run."""
    row = db.execute(
        "select r.log_path, j.spec_json from runs r join job_specs j on j.job_id = r.job_id "
        "where r.id = ?", [run_id]).fetchone()
    return None if row is None else (row[0], row[1])


def campaign_run_ids(db: Any, campaign_id: int, executors: Sequence[str]) -> list[int]:
    """The ids of a campaign's runs on ``executors`` (the Slurm ones: in whose folders a
    group's server records its job or step; jobs/executors/slurm_group.py)."""
    return [int(r[0]) for r in db.execute(
        f"select id from runs where campaign_id = ? and executor in ({marks(executors)})",
        [campaign_id, *executors])]
