"""What runs reported of where they ran: ``environment`` rows, host cores, GPU models.

A database an older dltop wrote lacks some ``environment`` columns: the rows carry the
columns this one has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.read.runs import in_chunks, marks
from dltop.store.read.schema import columns, has_table


def latest_run_devices(db: Any, campaign_ids: Sequence[int]) -> list[dict[str, Any]]:
    """``device``, ``host`` (its campaign's) and ``device_name`` of the latest run of each
    job that has one, in queue order (read through the runs, not the queue)."""
    return list(db.query(
        "select j.device, c.host, r.device_name from latest_runs r "
        "join jobs j on j.id = r.job_id join campaigns c on c.id = j.campaign_id "
        f"where r.campaign_id in ({marks(campaign_ids)}) order by j.campaign_id, j.position",
        list(campaign_ids)))


def has_gpu_jobs(db: Any, campaign_id: int) -> bool:
    """Whether any job of the campaign, run or queued, is a GPU one (the queue index);
    an ``unsatisfiable`` one never runs, so a campaign of those alone ran on no GPU."""
    return bool(db.execute(
        "select exists (select 1 from jobs where campaign_id = ? and "
        "substr(device, 1, 3) = 'gpu' and status != 'unsatisfiable')",
        [campaign_id]).fetchone()[0])


def distinct_environments(db: Any, campaign_ids: Sequence[int]) -> list[dict[str, Any]]:
    """One row per distinct environment of the runs of ``campaign_ids``, in the order of
    its first run: every ``environment`` column but ``run_id``, ``job_framework``,
    ``job_device``, ``campaign_host`` and ``runs_alike`` (how many runs reported it)."""
    if not has_table(db, "environment"):
        return []
    cols = [f"e.{c}" for c in sorted(columns(db, "environment")) if c != "run_id"]
    alike = ", ".join([*cols, "j.framework", "j.device", "c.host"])
    return list(db.query(
        f"select {', '.join(cols)}, j.framework as job_framework, "
        "j.device as job_device, c.host as campaign_host, count(*) as runs_alike "
        "from environment e join runs r on r.id = e.run_id "
        "join jobs j on j.id = r.job_id join campaigns c on c.id = j.campaign_id "
        f"where r.campaign_id in ({marks(campaign_ids)}) group by {alike} "
        "order by min(r.id)", list(campaign_ids)))


def host_cores(db: Any, run_ids: Sequence[int]) -> dict[int, int]:
    """Each run's host logical CPU count, as its stored environment gives it (runs
    without one, or a database without the table, are left out)."""
    if not run_ids or not has_table(db, "environment"):
        return {}
    out: dict[int, int] = {}
    for part, qs in in_chunks(run_ids):
        for row in db.execute(f"select run_id, logical_cores from environment where run_id "
                              f"in ({qs}) and logical_cores is not null", part):
            out[int(row[0])] = int(row[1])
    return out
