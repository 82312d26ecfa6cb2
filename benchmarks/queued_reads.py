"""Reads at 100 000 queued jobs: export and the results screen cost what they cost at 150.

Two campaign databases, built with bulk SQL (not timed): ``finished`` holds 150
jobs, each with one ok run (summary, 22 iterations of which 2 warm-up, an
environment row); ``queued`` holds the same 150 finished jobs followed by
99 850 queued ones (200 configurations × 500 repeats in queue order, as a
long study leaves its queue); ``old`` holds that queue as the dltop of migration 19
stored it (before ``job_configs``, each job row whole), read as it is (a read-only
open cannot migrate it) and after this dltop opened it once for writing (migrated;
the migration's CPU is printed). Each measurement runs in a fresh process, the two
databases alternating round by round, and prints the median of: ``dltop export``
(the pivot of median times rendered as Markdown: CPU seconds of the call and
the reader queries it made, counted by SQLite's trace callback), the TUI's
first visit to the results screen (``tui.results_view.compute``: pivot and
scaling table, wall and CPU seconds) and the process's peak RSS after the export
(imports included).

    .venv/bin/python benchmarks/queued_reads.py [--queued 100000] [--finished 150] [--rounds 3]
        [--old-schema 19]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scaledb

from dltop.store import connect


def measure(path: Path) -> dict[str, float]:
    """One fresh process's figures on ``path`` (imports done before timing)."""
    from dltop.results import export
    from dltop.tui.results_view import compute  # imported first: its cost is not timed

    db = connect(path, create=False)
    queries = [0]
    db.conn.set_trace_callback(lambda _sql: queries.__setitem__(0, queries[0] + 1))
    cpu = time.process_time()
    text = export.render(export.results_table(db, 1, "pivot", "time"), "md")
    cpu = time.process_time() - cpu
    db.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, screen_cpu = time.perf_counter(), time.process_time()
    data = compute(path, 1, "time")
    wall, screen_cpu = time.perf_counter() - wall, time.process_time() - screen_cpu
    return {"export_cpu_s": cpu, "queries": queries[0], "screen_s": wall,
            "screen_cpu_s": screen_cpu, "rows": len(data.pivot.rows), "chars": len(text),
            "rss_mb": rss}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queued", type=int, default=100_000, help="jobs in the long campaign")
    ap.add_argument("--finished", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old-schema", type=int, default=19,
                    help="the migration the old database stops at (19: before job_configs)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "finished.db", Path(tmp) / "queued.db"
        old, opened = Path(tmp) / "old.db", Path(tmp) / "old-opened.db"
        t0 = time.perf_counter()
        scaledb.build(small, args.finished, args.finished, "running")
        scaledb.build(big, args.queued, args.finished, "running")
        scaledb.build(old, args.queued, args.finished, "running", schema=args.old_schema)
        print(f"built in {time.perf_counter() - t0:.0f} s: {args.finished} finished jobs; "
              f"{args.queued} jobs of which {args.finished} finished "
              f"({big.stat().st_size / 2**20:.0f} MiB; at migration {args.old_schema}: "
              f"{old.stat().st_size / 2**20:.0f} MiB)")
        shutil.copy(old, opened)
        cpu = time.process_time()
        connect(opened).close()  # opened once for writing: migrated
        print(f"the old database opened once by this dltop: migrated in "
              f"{time.process_time() - cpu:.2f} s of CPU")
        names = {small: f"{args.finished}", big: f"{args.queued}",
                 old: f"{args.queued} v{args.old_schema} as is",
                 opened: f"{args.queued} v{args.old_schema} opened"}
        got: dict[Path, list[dict[str, float]]] = {p: [] for p in names}
        for r in range(args.rounds):
            for path in list(names) if r % 2 == 0 else reversed(names):
                out = subprocess.run([sys.executable, __file__, "--measure", str(path)],
                                     check=True, capture_output=True, text=True).stdout
                got[path].append(json.loads(out))
        print(f"{args.rounds} rounds alternating, fresh process each; medians")
        keys = ("export_cpu_s", "queries", "screen_s", "screen_cpu_s", "rss_mb", "rows")
        print(f"{'jobs':>24} " + " ".join(f"{k:>13}" for k in keys))
        med = {p: {k: statistics.median(m[k] for m in got[p]) for k in keys} for p in got}
        for p, name in names.items():
            print(f"{name:>24} " + " ".join(f"{med[p][k]:>13.3f}" for k in keys))
        print(f"{'old opened / new':>24} " + " ".join(
            f"{med[opened][k] / med[big][k]:>13.2f}" for k in keys))
        ok = all(med[p]["export_cpu_s"] <= 0.3 and med[p]["screen_s"] <= 0.5
                 for p in (big, opened))
        print(f"goal (export <= 0.3 s CPU, results screen <= 0.5 s at {args.queued} jobs, new "
              f"and old once opened): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
