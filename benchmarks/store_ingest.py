"""dltop's write path against bare sqlite3 ``executemany``, same rows, same schema (goal ≤ 1.2).

For each kind of row the engine stores in bulk (iterations, GPU windows, host
windows), 1 000 000 rows are written by each side in batches of ``--batch`` rows,
one transaction per batch, into its own database file with dltop's schema (WAL,
``synchronous=NORMAL``, foreign keys checked, as ``dltop run`` opens them):

- dltop: ``Store.add_iterations(run_id, rows)`` with the dict rows the collector
  builds, ``Store.telemetry.write_batch(Batch(...))`` with the sampler's frozen
  windows;
- bare: ``BEGIN IMMEDIATE``, ``executemany`` of one INSERT with the same columns
  over tuples built beforehand, ``COMMIT``.

The rows go in ``--rounds`` parts; the sides alternate part by part (which goes
first swaps each round), so a busy moment of a shared machine lands on both.
Printed per kind: each side's total wall seconds, and the mean of the per-round
ratios dltop/bare, in wall time and in this process's CPU time (steadier on a shared
machine), each with its 95 % confidence interval (t distribution over the rounds).

    .venv/bin/python benchmarks/store_ingest.py [--rows 1000000] [--batch 500] [--rounds 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dltop.store import Store, connect
from dltop.telemetry.sampler import Batch, GpuWindow, HostWindow

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 15: 2.13, 20: 2.09, 30: 2.04}
"""Two-sided 95 % quantiles of Student's t by degrees of freedom."""

ITER_COLUMNS = ("run_id", "idx", "seconds", "samples", "warmup", "loss", "t_mono_ns",
                "t_wall_s")


def _t95(df: int) -> float:
    return T95[max(k for k in T95 if k <= df)] if df >= 1 else float("nan")


def iteration_rows(n: int) -> list[dict[str, Any]]:
    """As the collector buffers them (every key, one dict per step)."""
    return [{"idx": i, "seconds": 0.001 + (i % 13) * 1e-6, "samples": 64, "warmup": int(i < 10),
             "loss": 2.0 - i * 1e-7, "t_mono_ns": 10**12 + i * 10**6,
             "t_wall_s": 1.7e9 + i / 1000} for i in range(n)]


def gpu_windows(n: int) -> list[GpuWindow]:
    return [GpuWindow(1, i / 2, i % 8, 5, 90.0, 80.0, 99.0, 2**30, 300.0, 290.0, 310.0, 150.0,
                      60.0, 1500.0, False, 1.7e9 + i / 2) for i in range(n)]


def host_windows(n: int) -> list[HostWindow]:
    return [HostWindow(1, i / 2, 5, 40.0, 100.0, 2**32, 0, 95.0, 2**30, 1.7e9 + i / 2, 30.0,
                       8.0, 0.5) for i in range(n)]


def _chunks(rows: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def _fresh(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = connect(path)  # dltop's schema, WAL
    store = Store(db)  # run 1, which the iterations reference
    cid = store.create_campaign("ingest", [], [], "host", 1, None)
    job = db.conn.execute("insert into jobs (campaign_id, position, status, framework, model, "
                          "batch_size, device) values (?, 0, 'running', 'torch', 'fcn-r', 64, "
                          "'cpu:1')", [cid]).lastrowid
    db.conn.commit()
    assert store.start_run(int(job or 0), cid, 1, "", 64) == 1
    db.close()
    return path


def _bare(conn: sqlite3.Connection, table: str, columns: Sequence[str],
          batches: list[list[tuple[Any, ...]]], replace: bool) -> tuple[float, float]:
    verb = "insert or replace" if replace else "insert"
    sql = f"{verb} into {table} ({', '.join(columns)}) values ({', '.join('?' * len(columns))})"
    t, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, batch)
        conn.execute("COMMIT")
    return time.perf_counter() - t, time.process_time() - cpu


def _dltop(store: Store, write: Callable[[Store, Any], None],
           batches: list[Any]) -> tuple[float, float]:
    t, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        write(store, batch)
    return time.perf_counter() - t, time.process_time() - cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=500, help="rows per transaction")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    n, size = args.rows, args.batch
    its = iteration_rows(n)
    gpus, hosts = gpu_windows(n), host_windows(n)
    gpu_cols = [f.name for f in dataclasses.fields(GpuWindow)]
    host_cols = [f.name for f in dataclasses.fields(HostWindow)]
    kinds: dict[str, tuple[Callable[[Store, Any], None], list[Any], str, Sequence[str],
                           list[list[tuple[Any, ...]]], bool]] = {
        "iterations": (lambda s, b: s.add_iterations(1, b), _chunks(its, size), "iterations",
                       ITER_COLUMNS, [[(1, *r.values()) for r in c] for c in _chunks(its, size)],
                       True),
        "gpu_samples": (lambda s, b: s.telemetry.write_batch(Batch(tuple(b), ())),
                        _chunks(gpus, size), "gpu_samples", gpu_cols,
                        [[dataclasses.astuple(w) for w in c] for c in _chunks(gpus, size)],
                        False),
        "host_samples": (lambda s, b: s.telemetry.write_batch(Batch((), tuple(b))),
                         _chunks(hosts, size), "host_samples", host_cols,
                         [[dataclasses.astuple(w) for w in c] for c in _chunks(hosts, size)],
                         False),
    }
    # Millions of input objects held here would make each full collection (set off by
    # the tuples dltop's side builds) walk them all: a cost of this script, not the store.
    gc.collect()
    gc.freeze()
    print(f"{n} rows per kind and side in {args.rounds} rounds of {n // args.rounds}, "
          f"{size} rows per transaction; dltop and bare alternate round by round (order "
          "swapped each round), each appending to its own database")
    print(f"{'rows':<13} {'bare s':>7} {'dltop s':>7} {'wall ratio':>11}  95% CI"
          f"         {'CPU ratio':>9}  95% CI")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for kind, (write, dl_batches, table, cols, bare_batches, replace) in kinds.items():
            store = Store(connect(_fresh(tmp, f"dltop-{kind}")))
            bare = sqlite3.connect(_fresh(tmp, f"bare-{kind}"), isolation_level=None)
            bare.execute("PRAGMA synchronous=NORMAL")
            bare.execute("PRAGMA foreign_keys=ON")  # as dltop's connection
            per_round = -(-len(dl_batches) // args.rounds)
            totals = {"bare": 0.0, "dltop": 0.0}
            ratios: tuple[list[float], list[float]] = ([], [])
            for r in range(args.rounds):
                part = slice(r * per_round, (r + 1) * per_round)
                times = {}
                for side in (("bare", "dltop") if r % 2 == 0 else ("dltop", "bare")):
                    times[side] = (_bare(bare, table, cols, bare_batches[part], replace)
                                   if side == "bare" else _dltop(store, write, dl_batches[part]))
                    totals[side] += times[side][0]
                for k in (0, 1):
                    ratios[k].append(times["dltop"][k] / times["bare"][k])
            for conn in (bare, store.db.conn):
                assert conn.execute(f"select count(*) from {table}").fetchone()[0] == n
            bare.close()
            store.db.close()
            cells = []
            for k in (0, 1):
                mean = statistics.fmean(ratios[k])
                half = (_t95(len(ratios[k]) - 1) * statistics.stdev(ratios[k])
                        / len(ratios[k]) ** 0.5 if len(ratios[k]) > 1 else float("nan"))
                cells.append(f"{mean:>{11 - 2 * k}.3f}  [{mean - half:.3f}, {mean + half:.3f}]")
                if k == 0:
                    worst = max(worst, mean)
            print(f"{kind:<13} {totals['bare']:>7.2f} {totals['dltop']:>7.2f} "
                  f"{cells[0]}  {cells[1]}")
    print(f"goal (ratio <= 1.2 for each kind): {'met' if worst <= 1.2 else 'NOT met'} "
          f"(worst mean {worst:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
