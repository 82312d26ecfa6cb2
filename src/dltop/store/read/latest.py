"""The latest attempt of each job of campaigns (the ``latest_runs`` view): the runs a
report draws and the failures its summary explains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.read.runs import marks


def runs_with_iterations(db: Any, campaign_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Each job's latest run that stored iterations (``run_id``, its flags and figures,
    its job's identity), in queue order."""
    return list(db.query(
        "select r.id as run_id, r.status, r.noisy, r.concurrent_runs, r.contaminated, "
        "r.telemetry_simulated, r.median_s, r.cv, r.n_iterations, j.framework, j.model, "
        "j.batch_size, j.device, j.repeat, j.campaign_id, j.position from jobs j "
        "join latest_runs r on r.job_id = j.id "
        f"where j.campaign_id in ({marks(campaign_ids)}) and coalesce(r.n_iterations, 0) > 0 "
        "order by j.campaign_id, j.position", list(campaign_ids)))


def failed_runs(db: Any, campaign_id: int) -> list[dict[str, Any]]:
    """The campaign's jobs whose latest run did not end ok, in queue order."""
    return list(db.query(
        "select j.id as job_id, r.status, r.error_message from jobs j "
        "join latest_runs r on r.job_id = j.id "
        "where j.campaign_id = ? and r.status != 'ok' order by j.position", [campaign_id]))
