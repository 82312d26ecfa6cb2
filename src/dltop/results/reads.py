"""What results read of a campaign: the runs that exist and the jobs never run, counted.

:func:`campaign_rows` gives :func:`dltop.results.aggregate.read_config_results` one row
per job that has a run and one per configuration and status of the jobs never run, read
without touching a queued job's row (issue 32: 100 000 queued jobs cost what their
configurations cost); :func:`per_run` the measured iterations of the ok runs, in one
query for the whole set.
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections import Counter
from typing import TYPE_CHECKING, Any

from dltop.catalog import JobStatus
from dltop.results.measured import NONE, Measured
from dltop.store import samples
from dltop.store.archive import unpack_measured
from dltop.store.read import jobruns, jobs

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

RUN_FIELDS = ("median_s", "mean_s", "samples_per_s", "samples_per_iter", "flops_per_sample",
              "device_name", "power_mean_w", "energy_j", "joules_per_sample", "gpu_util_mean_pct",
              "gpu_mem_peak_bytes", "gpu_mem_run_peak_bytes", "rss_peak_bytes",
              "host_cpu_mean_pct", "tree_cpu_mean_pct", "host_cpu_user_pct",
              "host_cpu_system_pct", "host_cpu_iowait_pct", "window_s", "gpu_readings",
              "host_readings", "cpu_joules_per_sample", "cpu_energy_note",
              "rss_peak_kernel_bytes", "energy_bound_j", "cpu_energy_j", "dram_energy_j",
              "cpu_energy_bound_j", "gpu_mem_framework_peak_bytes", "serve_window_s",
              "client_cpu_pct", "dispatch_lag_p99_s", "client_bound", "distinct_token_frac",
              "start_power_w", "idle_power_w", "idle_window_s", "idle_readings",
              "cpu_idle_power_w", "page_faults_per_step", "framework_version")
"""Stored ``runs`` columns a :class:`RunRecord` carries as they are."""


def campaign_rows(db: sqlite_utils.Database, cid: int) -> list[dict[str, Any]]:
    """A campaign's rows in queue order: one per job that has a run (its latest run's
    columns), and one per configuration and status of the jobs never run, ``jobs`` of
    them (the position and spec of the configuration's first job).

    The runs are read through their campaign index. The jobs never run come from
    ``job_configs`` (each configuration's job count, kept by triggers; migration 32
    counted every older job) less the jobs with a run, those not queued read through
    the queue index: no queued job's row is read.
    """
    ran = jobruns.latest_run_rows(db, cid, [c for c in RUN_FIELDS if c != "samples_per_iter"])
    never = _never_run(db, cid, ran)
    blank = dict.fromkeys(("run_id", "status", "n_iterations", "asked_iterations",
                           "python_executable", "median_s", "device_name"))
    rows = ran + [{**blank, **r} for r in never]
    rows.sort(key=lambda r: int(r["position"] or 0))
    return rows


def _never_run(db: sqlite_utils.Database, cid: int,
               ran: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs of a campaign without a run, one row per configuration and job status."""
    configs = jobs.configurations(db, cid)
    other = jobs.never_run_not_queued(db, cid)
    left = Counter({str(k["config_key"]): int(k["jobs"]) for k in configs})
    left.subtract(str(r["config_key"]) for r in ran)
    for r in other:
        left[str(r["config_key"])] -= int(r["jobs"])
    queued = [{**k, "job_status": JobStatus.QUEUED, "jobs": left[str(k["config_key"])]}
              for k in configs if left[str(k["config_key"])] > 0]
    return other + queued


def per_run(db: sqlite_utils.Database, run_ids: list[int], no_tree: set[int],
             ) -> tuple[dict[int, Measured], dict[int, float]]:
    """Measured iterations of each run, and the mean process-tree CPU of those of
    ``no_tree`` (runs whose summary lacks it) over all their host samples."""
    iters: dict[int, Measured] = dict.fromkeys(run_ids, NONE)
    trees: dict[int, float] = {}
    if not run_ids:
        return iters, trees
    rows = jobruns.measured_iterations(db, run_ids)
    for run_id, group in itertools.groupby(rows, key=operator.itemgetter(0)):
        _, seconds, counts = zip(*group, strict=True)
        iters[run_id] = Measured(_column(seconds, "d", float), _column(counts, "q", int))
    trees.update(samples.tree_cpu_means(db, sorted(no_tree)))
    _archived(db, run_ids, iters, trees)
    return iters, trees


def _column(values: tuple[Any, ...], code: str, kind: type[float] | type[int]) -> array[Any]:
    """``values`` as an array of ``code``: at once where SQLite gave them the array's
    type, else each converted (a REAL sample count, a number stored as text)."""
    try:
        return array(code, values)
    except TypeError:
        return array(code, (kind(v) for v in values))


def _archived(db: sqlite_utils.Database, run_ids: list[int],
              iters: dict[int, Measured], trees: dict[int, float]) -> None:
    """What ``dltop prune`` kept of pruned runs' raw rows (dltop.store.retention)."""
    for row in jobruns.archived(db, run_ids):
        iters[row["run_id"]] = Measured.of(unpack_measured(row["measured_seconds"],
                                                           row["measured_samples"]))
        if row["tree_cpu_all_pct"] is not None:
            trees[row["run_id"]] = float(row["tree_cpu_all_pct"])
