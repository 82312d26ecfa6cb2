"""Reads at 100 000 queued jobs: export and the results screen cost what they cost at 150.

Two campaign databases, built with bulk SQL (not timed): ``finished`` holds 150
jobs, each with one ok run (summary, 22 iterations of which 2 warm-up, an
environment row); ``queued`` holds the same 150 finished jobs followed by
99 850 queued ones (200 configurations × 500 repeats in queue order, as a
long study leaves its queue). Each measurement runs in a fresh process, the two
databases alternating round by round, and prints the median of: ``dltop export``
(the pivot of median times rendered as Markdown: CPU seconds of the call and
the reader queries it made, counted by SQLite's trace callback), the TUI's
first visit to the results screen (``tui.results_view.compute``: pivot and
scaling table, wall and CPU seconds) and the process's peak RSS after the export
(imports included).

    .venv/bin/python benchmarks/queued_reads.py [--queued 100000] [--finished 150] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
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
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "finished.db", Path(tmp) / "queued.db"
        t0 = time.perf_counter()
        scaledb.build(small, args.finished, args.finished, "running")
        scaledb.build(big, args.queued, args.finished, "running")
        print(f"built in {time.perf_counter() - t0:.0f} s: {args.finished} finished jobs; "
              f"{args.queued} jobs of which {args.finished} finished "
              f"({big.stat().st_size / 2**20:.0f} MiB)")
        got: dict[Path, list[dict[str, float]]] = {small: [], big: []}
        for r in range(args.rounds):
            for path in (small, big) if r % 2 == 0 else (big, small):
                out = subprocess.run([sys.executable, __file__, "--measure", str(path)],
                                     check=True, capture_output=True, text=True).stdout
                got[path].append(json.loads(out))
        print(f"{args.rounds} rounds alternating, fresh process each; medians")
        keys = ("export_cpu_s", "queries", "screen_s", "screen_cpu_s", "rss_mb", "rows")
        print(f"{'jobs':>8} " + " ".join(f"{k:>13}" for k in keys))
        med = {p: {k: statistics.median(m[k] for m in got[p]) for k in keys} for p in got}
        for p, n in ((small, args.finished), (big, args.queued)):
            print(f"{n:>8} " + " ".join(f"{med[p][k]:>13.3f}" for k in keys))
        print("ratio    " + " ".join(f"{med[big][k] / med[small][k]:>13.2f}" for k in keys))
        ok = med[big]["export_cpu_s"] <= 0.3 and med[big]["screen_s"] <= 0.5
        print(f"goal (export <= 0.3 s CPU, results screen <= 0.5 s at {args.queued} jobs): "
              f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
