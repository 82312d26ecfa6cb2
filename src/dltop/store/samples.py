"""Reading the sample tables (``gpu_samples``, ``host_samples``): one module for every reader.

The run trace (report, TUI run detail), the live viewer's refresh, the remote GPU
panel and the exports read a run's telemetry windows here, so that a column a
migration adds, a database before it (read-only opens are not migrated) and an
index the reads must use are handled in one place. Every read is by ``run_id``
(both tables' index; tests/store/test_query_plans.py holds them to it). A running
run is read incrementally: ``since_s`` (windows starting after a monotonic time,
what a chart already has) or ``after_rowid`` (windows stored after a row, what a
panel already saw).

Plain SQL through the connection's ``query``/``execute``: a ``sqlite_utils.Database``
or a read-only :class:`dltop.store.reader.ReadDb` (no sqlite-utils import here).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from dltop.store.read.schema import columns

GPU = "gpu_samples"
HOST = "host_samples"

GPU_SERIES = ("gpu_index, t_start_mono_s, util_mean_pct, mem_used_max_bytes, power_mean_w, "
              "temperature_max_c, sm_clock_mhz, simulated")
"""What a GPU series draws of each window (``node`` is added: :func:`gpu_node_column`)."""

HOST_SERIES = "t_start_mono_s, cpu_mean_pct, tree_cpu_pct, tree_rss_bytes"
"""What a host series draws of each window."""

def gpu_node_column(db: Any) -> str:
    """``node`` when ``gpu_samples`` has it (migration 16), else a NULL in its place: a
    database opened read-only is not migrated."""
    return "node" if "node" in columns(db, GPU) else "null"


def count(db: Any, table: str, run_id: int) -> int:
    """How many rows of ``table`` (:data:`GPU`, :data:`HOST`, ``iterations``) the run has."""
    (n,) = db.execute(f"select count(*) from {table} where run_id = ?", [run_id]).fetchone()
    return int(n)


def gpu_count(db: Any, run_id: int) -> tuple[int, int]:
    """The run's GPU windows and how many GPUs (a GPU is (node, index)) they come from."""
    node = gpu_node_column(db)
    n, gpus = db.execute(f"select count(*), count(distinct coalesce({node}, '') || ':' "
                         f"|| gpu_index) from {GPU} where run_id = ?", [run_id]).fetchone()
    return int(n), int(gpus)


def _since(since_s: float | None) -> tuple[str, list[float]]:
    return ("", []) if since_s is None else (" and t_start_mono_s > ?", [since_s])


def gpu_series(db: Any, run_id: int, *, every: int | None = None,
               since_s: float | None = None) -> list[dict[str, Any]]:
    """The run's GPU windows in (GPU index, time) order, :data:`GPU_SERIES` and ``node``.

    Args:
        db: any dltop database connection.
        run_id: the run.
        every: every k-th window of each GPU (each (node, index) counted on its own),
            its first kept: a long run thinned. ``None``: every window, unnumbered.
        since_s: only windows starting after this monotonic time (a refresh).
    """
    node = gpu_node_column(db)  # a GPU is (node, index): a Slurm run's nodes each have a 0
    cond, params = _since(since_s)
    if every is None:
        return list(db.query(
            f"select {node} as node, {GPU_SERIES} from {GPU} where run_id = ?{cond} "
            "order by gpu_index, t_start_mono_s", [run_id, *params]))
    return list(db.query(
        f"select {node} as node, {GPU_SERIES} from (select *, row_number() over "
        f"(partition by {node}, gpu_index order by t_start_mono_s) - 1 as rn from {GPU} "
        f"where run_id = ?{cond}) where rn % ? = 0 order by gpu_index, t_start_mono_s",
        [run_id, *params, every]))


def host_series(db: Any, run_id: int, *, every: int | None = None,
                since_s: float | None = None) -> list[dict[str, Any]]:
    """The run's host windows in time order, :data:`HOST_SERIES`; ``every`` and
    ``since_s`` as for :func:`gpu_series`."""
    cond, params = _since(since_s)
    if every is None:
        return list(db.query(f"select {HOST_SERIES} from {HOST} where run_id = ?{cond} "
                             "order by t_start_mono_s", [run_id, *params]))
    return list(db.query(
        f"select {HOST_SERIES} from (select *, row_number() over (order by t_start_mono_s) "
        f"- 1 as rn from {HOST} where run_id = ?{cond}) where rn % ? = 0 "
        "order by t_start_mono_s", [run_id, *params, every]))


def gpu_rows_after(db: Any, run_id: int, after_rowid: int) -> list[tuple[Any, ...]]:
    """The run's GPU windows stored after row ``after_rowid``, in storage order: (rowid,
    node, gpu_index, util_mean_pct, power_mean_w, mem_used_max_bytes, t_wall_s,
    simulated). Empty for a database before migration 16 (no ``node``)."""
    try:
        return list(db.execute(
            "select rowid, node, gpu_index, util_mean_pct, power_mean_w, mem_used_max_bytes, "
            f"t_wall_s, simulated from {GPU} where run_id = ? and rowid > ? order by rowid",
            [run_id, after_rowid]).fetchall())
    except sqlite3.OperationalError:
        return []


def node_gpu_totals(db: Any, run_id: int) -> list[dict[str, Any]]:
    """Per node and GPU of a run's node agents' rows: ``node, gpu_index, n, util, power,
    mem, energy, sim``. Empty for a local run and a database before migration 16."""
    try:
        return list(db.query(
            "select node, gpu_index, sum(n) as n, sum(util_mean_pct * n) / sum(n) as util, "
            "avg(power_mean_w) as power, max(mem_used_max_bytes) as mem, "
            "max(energy_j) - min(energy_j) as energy, max(simulated) as sim "
            f"from {GPU} where run_id = ? and node is not null "
            "group by node, gpu_index order by node, gpu_index", [run_id]))
    except sqlite3.OperationalError:
        return []


def newest_host(db: Any, run_id: int) -> dict[str, Any] | None:
    """The run's newest host window (``tree_cpu_pct, tree_rss_bytes``), None before one."""
    return next(iter(db.query(f"select tree_cpu_pct, tree_rss_bytes from {HOST} "
                              "where run_id = ? order by rowid desc limit 1", [run_id])),
                None)


def tree_cpu_means(db: Any, run_ids: Sequence[int]) -> dict[int, float]:
    """Run -> its process tree's mean CPU % over its host windows (weighted by readings);
    runs without a reading are left out."""
    if not run_ids or HOST not in db.table_names():
        return {}
    return {int(r["run_id"]): float(r["pct"]) for r in db.query(
        f"select run_id, sum(tree_cpu_pct * n) / sum(n) as pct from {HOST} "
        f"where run_id in ({','.join('?' * len(run_ids))}) and tree_cpu_pct is not null "
        "and n > 0 group by run_id", list(run_ids))}


def any_simulated(db: Any, campaign_ids: Sequence[int]) -> bool:
    """Whether any GPU window of the campaigns' runs is simulated (for a database before
    migration 11, which flags it on the run)."""
    marks = ",".join("?" * len(campaign_ids))
    return bool(next(iter(db.query(
        f"select exists (select 1 from {GPU} g join runs r on r.id = g.run_id "
        f"where r.campaign_id in ({marks}) and g.simulated = 1) as n",
        list(campaign_ids))))["n"])


def run_simulated(db: Any, run_id: int) -> bool:
    """Whether any GPU window of the run is simulated."""
    return bool(next(iter(db.query(
        f"select exists(select 1 from {GPU} where run_id = ? and simulated = 1) as s",
        [run_id])))["s"])


def node_windows(db: Any, run_id: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A Slurm run's node agents' windows with a wall time, in time order: GPU rows
    (node, gpu_index, t_wall_s, n, util_mean_pct, util_max_pct, mem_used_max_bytes,
    power_mean_w, energy_j, simulated) and host rows (node, t_wall_s, n, cpu_mean_pct,
    cpu_user_pct, cpu_system_pct, cpu_iowait_pct)."""
    q = db.execute
    gpu = list(q("select node, gpu_index, t_wall_s, n, util_mean_pct, util_max_pct, "
                 f"mem_used_max_bytes, power_mean_w, energy_j, simulated from {GPU} "
                 "where run_id = ? and node is not null and t_wall_s is not null "
                 "order by t_wall_s", [run_id]))
    host = list(q("select node, t_wall_s, n, cpu_mean_pct, cpu_user_pct, cpu_system_pct, "
                  f"cpu_iowait_pct from {HOST} where run_id = ? and node is not null "
                  "and t_wall_s is not null order by t_wall_s", [run_id]))
    return gpu, host
