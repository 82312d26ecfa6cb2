"""Schema steps after 21, beside :mod:`dltop.store.schema_steps` (which is full): each a
function here and one line in :data:`dltop.store.migrations.MIGRATIONS`."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

V22_CAMPAIGN_COLUMNS: dict[str, type] = {
    "engine_host": str,
    "engine_heartbeat_s": float,
}
"""The engine's host name and its last heartbeat (epoch seconds, the engine's clock)."""
V22_RUN_COLUMNS: dict[str, type] = {
    "queue_s": float,
    "submitted_at": str,
    "slurm_max_rss_bytes": int,
    "slurm_elapsed_s": float,
    "slurm_energy_j": float,
    "slurm_acct_note": str,
}
"""A Slurm run's time pending in the queue and submission time, and what ``sacct`` says
of its job (or why it says nothing: ``slurm_acct_note``)."""


def v22(db: Any) -> None:
    # Slurm at real sites (issue 33): the engine's liveness is read across login nodes
    # from the database (host and heartbeat, not a pid only this host can check), and a
    # Slurm run's queue time is apart from its run time, with accounting's own figures
    # beside dltop's. Runs and campaigns stored before keep NULL (not known).
    for name, kind in V22_CAMPAIGN_COLUMNS.items():
        db["campaigns"].add_column(name, kind)
    for name, kind in V22_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def executor_sql(columns: Collection[str], alias: str) -> str:
    """SQL of a run's executor name (``alias``: the runs table's name in the query):
    ``runs.executor``, or on a database migration 30 has not reached (one opened
    read-only) the name that migration fills in from the Slurm columns (a Slurm job
    with a local srun pid was a step, without one a batch job)."""
    if "executor" in columns:
        return f"{alias}.executor"
    if "slurm_job_id" not in columns:
        return "'local'"
    return (f"case when {alias}.slurm_job_id is null then 'local' when {alias}.pid is null "
            "then 'slurm-batch' else 'slurm-step' end")


def queue_columns_sql(columns: Collection[str], alias: str = "r") -> str:
    """SQL of what a run's executor is asked whether it still holds the run in a queue
    (:func:`dltop.jobs.executors.where.queued_reason`): ``executor``, ``slurm_job_id``,
    ``slurm_state`` and ``slurm_reason`` (NULL before migration 15)."""
    slurm = ", ".join(f"{alias}.{c}" if "slurm_state" in columns else f"null as {c}"
                      for c in ("slurm_job_id", "slurm_state", "slurm_reason"))
    return f"{executor_sql(columns, alias)} as executor, {slurm}"


def v30(db: Any) -> None:
    # Which executor ran a run is stored, not guessed from the Slurm columns at each
    # resume; rows before it get the name that guess gave.
    db["runs"].add_column("executor", str)
    db.execute(f"update runs set executor = {executor_sql({'slurm_job_id'}, 'runs')}")
