"""The scale benchmarks' campaign database, built with bulk SQL (not timed).

Shared by benchmarks/export_scale.py and benchmarks/queued_reads.py (run as scripts:
their own folder is on ``sys.path``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import sqlite_utils

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.joblist import JobList
from dltop.profiles.loader import parse
from dltop.store import connect
from dltop.store.migrations import apply
from dltop.store.rows import insert_jobs

PROFILE = """
[[matrix]]
frameworks = ["torch", "tensorflow"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [{batches}]
devices = ["cpu:1", "cpu:2", "gpu:1", "gpu:2"]
batch_scaling = "per-device"
"""


def build(path: Path, n_jobs: int, n_finished: int, status: str,
          schema: int | None = None) -> None:
    """A campaign (``status``) of ``n_jobs`` jobs of 200 configurations in queue order, the
    first ``n_finished`` done (ok): each with its run's summary, 20 measured iterations
    (and 2 of warm-up) and its environment row; the rest queued.

    ``schema``: the database as the dltop of that migration left it (19: before
    ``job_configs``, each job row whole), not migrated further; None: this dltop's.
    """
    if schema is None:
        db = connect(path)
    else:
        db = sqlite_utils.Database(path)
        apply(db, upto=schema)
    conn = db.conn
    configs = parse(PROFILE.format(batches=", ".join(str(8 * (k + 1)) for k in range(25))),
                    "p.toml", "p").jobs  # 200 configurations
    full, rest = divmod(n_jobs, len(configs))  # repeat passes, as a profile's queue is
    jobs = JobList([(tuple(configs), full),
                    (tuple(dataclasses.replace(j, repeat=full) for j in configs[:rest]), 1)])
    conn.execute("begin")
    conn.execute("insert into campaigns (id, name, status, created_at, host, dltop_version) "
                 "values (1, 'scale', ?, '2026-11-23T00:00:00Z', 'host', '0')", [status])
    # as dltop stores a queue: one spec per configuration, rows that reference it
    insert_jobs(db, 1, 0, jobs, [RunStatus.OK if k < n_finished else JobStatus.QUEUED
                                 for k in range(len(jobs))])
    done = jobs[:n_finished]
    conn.executemany(
        "insert into runs (id, job_id, campaign_id, attempt, status, samples_per_iter, "
        "n_iterations, median_s, mean_s, p10_s, p90_s, cv, samples_per_s, noisy, "
        "concurrent_runs, contaminated, telemetry_simulated, tree_cpu_mean_pct, "
        "host_cpu_mean_pct, rss_peak_bytes, power_mean_w, joules_per_sample, device_name) "
        "values (?, ?, 1, 1, 'ok', 64, 20, ?, ?, ?, ?, 0.01, ?, 0, 0, 0, 0, 95.0, 40.0, "
        "1073741824, ?, ?, ?)",
        ((k + 1, k + 1, 0.1 + k % 7 / 100, 0.1, 0.09, 0.11, 640.0,
          300.0 if j.device.kind == "gpu" else None,
          0.5 if j.device.kind == "gpu" else None,
          "NVIDIA H100" if j.device.kind == "gpu" else None) for k, j in enumerate(done)))
    conn.executemany("insert into iterations (run_id, idx, seconds, samples, warmup, loss) "
                     "values (?, ?, ?, 64, ?, null)",
                     ((r, i, 0.1 + i / 1e4, int(i < 2)) for r in range(1, n_finished + 1)
                      for i in range(22)))
    conn.executemany("insert into environment (run_id, host, framework, python_executable) "
                     "values (?, 'host', ?, '/usr/bin/python3')",
                     ((k + 1, j.framework) for k, j in enumerate(done)))
    conn.execute("commit")
    db.close()
