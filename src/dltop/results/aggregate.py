"""Per-configuration results over repeats (the cells of the paper's tables).

Only the latest attempt of each job counts (a retried job's earlier attempts
are history). A configuration's value is the median of its ok runs' medians;
its spread is max - min of those medians.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import sqlite_utils

FAILURE_PRECEDENCE = ("oom", "unsupported", "unsatisfiable", "timeout", "diverged",
                      "crashed", "cancelled", "running", "queued")
"""When no repeat is ok, the cell shows the first of these that any repeat has."""


@dataclass(frozen=True)
class ConfigResult:
    """One configuration (framework, model, batch, device, precision) over its repeats."""

    framework: str
    model: str
    batch_size: int
    device: str
    precision: str
    status: str
    n_runs: int
    median_s: float | None
    spread_s: float | None
    samples_per_s: float | None
    noisy: bool
    packed: bool = False
    """Some run of it was measured while other runs shared the host (``--pack``)."""
    contaminated: bool = False
    """Some run of it saw foreign processes on its GPUs or pinned CPUs (``runs.contaminated``)."""


def rank(value: str, order: tuple[str, ...]) -> int:
    """Position of ``value`` in a catalogue order (``catalog.MODELS``...); unknowns last."""
    return order.index(value) if value in order else len(order)


def config_results(db: sqlite_utils.Database, campaign_id: int) -> list[ConfigResult]:
    """Every configuration of a campaign, in queue order of first appearance."""
    sql = """
        select j.config_key, j.position, j.framework, j.model, j.batch_size, j.device,
               j.precision, j.status as job_status, r.status, r.median_s, r.noisy,
               r.samples_per_iter, r.concurrent_runs, r.contaminated
        from jobs j
        left join runs r on r.id = (select max(id) from runs where job_id = j.id)
        where j.campaign_id = ?
        order by j.position
    """
    groups: dict[str, list[dict[str, object]]] = {}
    for row in db.query(sql, [campaign_id]):
        groups.setdefault(row["config_key"], []).append(row)
    return [_combine(rows) for rows in groups.values()]


def _combine(rows: list[dict[str, object]]) -> ConfigResult:
    first = rows[0]
    ok = [r for r in rows if r["status"] == "ok" and r["median_s"] is not None]
    statuses = [str(r["status"] or r["job_status"]) for r in rows]
    median: float | None
    spread: float | None
    thr: float | None
    if ok:
        medians = [float(r["median_s"]) for r in ok]  # type: ignore[arg-type]
        median = statistics.median(medians)
        samples = int(ok[0]["samples_per_iter"] or first["batch_size"])  # type: ignore[call-overload]
        status, spread, thr = "ok", max(medians) - min(medians), samples / median
        noisy = any(bool(r["noisy"]) for r in ok)
        packed = any(bool(r["concurrent_runs"]) for r in ok)
        contaminated = any(bool(r["contaminated"]) for r in ok)
    else:
        status = next((s for s in FAILURE_PRECEDENCE if s in statuses), statuses[0])
        median = spread = thr = None
        noisy = packed = contaminated = False
    return ConfigResult(
        framework=str(first["framework"]), model=str(first["model"]),
        batch_size=int(first["batch_size"]), device=str(first["device"]),  # type: ignore[call-overload]
        precision=str(first["precision"]), status=status, n_runs=len(ok),
        median_s=median, spread_s=spread, samples_per_s=thr, noisy=noisy,
        packed=packed, contaminated=contaminated,
    )
