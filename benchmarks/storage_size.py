"""What migration 12 and `dltop prune` save: a database of ~1 M iterations, measured.

A database at schema version 10 (``iterations`` a rowid table with its separate
primary-key index) gets ``--runs`` finished runs of ``--iterations`` rows each,
written through the store as the engine writes them, plus 2 GPU and 1 host
telemetry windows per second of a 10 ms step. Printed, each after ``VACUUM``:

- the file and ``iterations``' share (table + indexes, from SQLite's dbstat)
  at version 10, then after migration 12 (``WITHOUT ROWID``): the ratio;
- after ``dltop prune`` of the campaign (summaries kept): the file, and the
  ``run_archive`` that keeps exports identical.

    .venv/bin/python benchmarks/storage_size.py [--runs 1000] [--iterations 1000]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
from pathlib import Path

import sqlite_utils

from dltop.catalog import CampaignStatus, RunStatus
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.store import migrations as migs
from dltop.store.tx import transaction


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes of each table with its indexes."""
    conn = sqlite3.connect(path)
    try:
        return {t: int(b) for t, b in conn.execute(
            "select m.tbl_name, sum(s.pgsize) from dbstat s join sqlite_master m "
            "on m.name = s.name group by m.tbl_name")}
    finally:
        conn.close()


def vacuumed_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return path.stat().st_size


def build_v10(path: Path, runs: int, iterations: int) -> None:
    db = sqlite_utils.Database(path)
    db.enable_wal()
    migs.apply(db, upto=10)
    store = Store(db)
    rng = random.Random(1)
    jobs = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [64]\n'
                 f'devices = ["cpu:1"]\n[defaults]\nrepeats = {runs}\n', "b.toml", "b").jobs
    cid = store.create_campaign("bench", ["b.toml"], ["dltop"], "h", 1, None)
    t0 = time.time()
    for job_id in store.add_jobs(cid, jobs):
        # a run row as dltop wrote it then (today's start_run stores runs.executor, of 29)
        rid = db["runs"].insert({"job_id": job_id, "campaign_id": cid, "attempt": 1,
                                 "status": "running", "samples_per_iter": 64}).last_pk
        rows = [{"idx": i, "seconds": rng.gauss(0.01, 0.001), "samples": 64,
                 "warmup": int(i < 10), "loss": rng.random(), "t_mono_ns": 10**12 + i * 10**7,
                 "t_wall_s": t0 + i * 0.01} for i in range(iterations)]
        for k in range(0, iterations, 500):
            store.add_iterations(rid, rows[k:k + 500])
        windows = max(1, iterations // 50)  # 2 windows/s of 10 ms steps
        with transaction(db):
            db["gpu_samples"].insert_all(
                [{"run_id": rid, "t_start_mono_s": w * 0.5, "t_wall_s": t0 + w * 0.5,
                  "gpu_index": 0, "n": 5, "util_mean_pct": 90.0, "power_mean_w": 250.0,
                  "simulated": 0} for w in range(windows)])
            db["host_samples"].insert_all(
                [{"run_id": rid, "t_start_mono_s": w * 0.5, "t_wall_s": t0 + w * 0.5, "n": 5,
                  "cpu_mean_pct": 50.0, "tree_cpu_pct": 99.0} for w in range(windows // 2)])
        store.finish_run(rid, job_id, RunStatus.OK, {"median_s": 0.01})
    store.set_campaign_status(cid, CampaignStatus.FINISHED)
    db.conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        build_v10(path, args.runs, args.iterations)
        v10 = vacuumed_size(path), table_bytes(path)["iterations"]
        t = time.perf_counter()
        db = connect(path)  # applies the migrations this dltop has (12 among them)
        migrate_s = time.perf_counter() - t
        n = db["iterations"].count
        db.conn.close()
        v12 = vacuumed_size(path), table_bytes(path)["iterations"]
        db = connect(path)
        store = Store(db)
        t = time.perf_counter()
        for rid in store.retention.runs_of(store.retention.ended_campaigns()):
            store.retention.prune_run(rid)
        prune_s = time.perf_counter() - t
        db.conn.close()
        pruned = vacuumed_size(path), table_bytes(path).get("run_archive", 0)
    mb = 1e6
    print(f"{n:,} iterations in {args.runs} runs")
    print(f"{'':34} {'file MB':>9} {'iterations MB':>14}")
    print(f"{'v10 (rowid + primary-key index)':34} {v10[0] / mb:9.1f} {v10[1] / mb:14.1f}")
    print(f"{'v12 (WITHOUT ROWID)':34} {v12[0] / mb:9.1f} {v12[1] / mb:14.1f}   "
          f"iterations {v12[1] / v10[1]:.2f}x, file {v12[0] / v10[0]:.2f}x "
          f"(migration {migrate_s:.1f} s)")
    print(f"{'after prune + vacuum':34} {pruned[0] / mb:9.1f} {'':>14}   "
          f"file {pruned[0] / v10[0]:.2f}x of v10; run_archive {pruned[1] / mb:.1f} MB "
          f"(prune {prune_s:.1f} s)")


if __name__ == "__main__":
    main()
