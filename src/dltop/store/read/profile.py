"""Operator profiles: a run's ``profile_ops`` rows and the runs that stored one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.read.runs import marks
from dltop.store.read.schema import has_table


def ops(db: Any, run_id: int, *, top: int | None = None) -> list[dict[str, Any]]:
    """The run's operators by rank (``top``: those ranked up to it only; none before
    migration 14): rank, name, calls, self_cpu_ms, self_device_ms, share_pct, shapes."""
    if not has_table(db, "profile_ops"):
        return []
    upto = "" if top is None else " and rank <= ?"
    return list(db.query("select rank, name, calls, self_cpu_ms, self_device_ms, share_pct, "
                         f"shapes from profile_ops where run_id = ?{upto} order by rank",
                         [run_id] if top is None else [run_id, top]))


def profiled_runs(db: Any, campaign_ids: Sequence[int], limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` ok runs of the campaigns with a stored profile, in run order:
    id, profile_steps, profile_step_ms, profile_device and the job's framework, model,
    batch_size, device, repeat."""
    if not campaign_ids or not has_table(db, "profile_ops"):
        return []
    return list(db.query(
        "select r.id, r.profile_steps, r.profile_step_ms, r.profile_device, "
        "j.framework, j.model, j.batch_size, j.device, j.repeat from runs r "
        f"join jobs j on j.id = r.job_id where r.campaign_id in ({marks(campaign_ids)}) "
        "and r.status = 'ok' and r.profile_steps > 0 "
        f"order by r.id limit {int(limit)}", list(campaign_ids)))
