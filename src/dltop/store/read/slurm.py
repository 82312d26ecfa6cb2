"""The Slurm state of runs as stored: the queue reason a viewer shows, the run folder a
resume adopts (one reader for live/ and the executors)."""

from __future__ import annotations

from typing import Any

from dltop.store.read.schema import columns

_QUEUED = (
    "case when r.slurm_job_id is not null and (r.slurm_state is null or r.slurm_state = "
    "'PENDING') then coalesce(r.slurm_reason, 'submitted') end")

PENDING_JOB = (
    "case when status = 'running' then (select 'pending (' || coalesce(r.slurm_reason, '-') "
    "|| ')' from latest_runs r where r.job_id = jobs.id and r.slurm_state = 'PENDING') end")
"""A ``jobs`` row's ``pending (<squeue's reason>)`` while Slurm holds its run in its queue."""


def queued_in_slurm(db: Any) -> str:
    """SQL of a run ``r``'s Slurm job still in the queue (submitted, not seen, or PENDING):
    squeue's reason, ``submitted`` before there is one; NULL once it runs, for a local run,
    and in a database from before the Slurm columns."""
    return _QUEUED if "slurm_state" in columns(db, "runs") else "null"


def log_and_spec(db: Any, run_id: int) -> tuple[str | None, str] | None:
    """The run's log path and its job's spec JSON (what a COMPLETED job is adopted
    from), None when there is no such run."""
    row = db.execute(
        "select r.log_path, j.spec_json from runs r join job_specs j on j.job_id = r.job_id "
        "where r.id = ?", [run_id]).fetchone()
    return None if row is None else (row[0], row[1])
