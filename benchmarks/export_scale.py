"""Export time with and without telemetry: a 10 000-run campaign (goal: ratio ≤ 1.2).

Two databases hold the same campaign (10 000 jobs, each with one finished run,
its summary and 20 iterations); one also holds 2 000 000 telemetry rows (half
GPU windows, half host windows, spread over the runs), as a long campaign leaves
them. Both are built with bulk SQL (not timed). Then each export is timed on both,
alternating round by round: the pivot table of median times (``dltop export``,
the TUI's results screen), the pivot of CPU (which falls back to host samples for
runs without a stored mean) and, with ``--summary``, the summary table; printed as
medians and the ratio with / without telemetry.

    .venv/bin/python benchmarks/export_scale.py [--runs 10000] [--samples 2000000] [--rounds 3]
        [--summary]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import scaledb

from dltop.results import export
from dltop.store import connect

EXPORTS = (("pivot, time", "pivot", "time"), ("pivot, cpu", "pivot", "cpu"))
SUMMARY = ("summary", "summary", "time")
"""Opt-in (``--summary``): its bootstrap intervals took minutes at 10 000 runs before issue
32; benchmarks/summary_scale.py times it now."""


def add_telemetry(path: Path, n_runs: int, n_rows: int) -> None:
    """``n_rows`` sample rows, half GPU windows and half host windows, over the runs."""
    db = connect(path)
    conn = db.conn
    per_run = max(1, n_rows // 2 // n_runs)
    conn.execute("begin")
    conn.executemany(
        "insert into gpu_samples (run_id, t_start_mono_s, t_wall_s, gpu_index, n, "
        "util_mean_pct, util_min_pct, util_max_pct, mem_used_max_bytes, power_mean_w, "
        "power_min_w, power_max_w, energy_j, temperature_max_c, sm_clock_mhz, simulated) "
        "values (?, ?, ?, 0, 5, 90, 80, 99, 1073741824, 300, 290, 310, 150, 60, 1500, 0)",
        ((r, t / 2, 1.7e9 + t / 2) for r in range(1, n_runs + 1) for t in range(per_run)))
    conn.executemany(
        "insert into host_samples (run_id, t_start_mono_s, t_wall_s, n, cpu_mean_pct, "
        "cpu_max_core_pct, mem_used_bytes, swap_used_bytes, tree_cpu_pct, tree_rss_bytes, "
        "cpu_user_pct, cpu_system_pct, cpu_iowait_pct) "
        "values (?, ?, ?, 1, 40, 100, 4294967296, 0, 95, 1073741824, 30, 8, 0.5)",
        ((r, t / 2, 1.7e9 + t / 2) for r in range(1, n_runs + 1) for t in range(per_run)))
    conn.execute("commit")
    db.close()


def timed(path: Path, table: str, metric: str) -> tuple[float, str]:
    db = connect(path, create=False)
    t = time.perf_counter()
    text = export.render(export.results_table(db, 1, table, metric), "md")
    elapsed = time.perf_counter() - t
    db.close()
    return elapsed, text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--summary", action="store_true", help="time the summary table too")
    args = ap.parse_args()
    exports = (*EXPORTS, SUMMARY) if args.summary else EXPORTS
    with tempfile.TemporaryDirectory() as tmp:
        bare, full = Path(tmp) / "bare.db", Path(tmp) / "telemetry.db"
        t0 = time.perf_counter()
        scaledb.build(bare, args.runs, args.runs, "finished")
        shutil.copy(bare, full)
        add_telemetry(full, args.runs, args.samples)
        sizes = {p: p.stat().st_size / 2**20 for p in (bare, full)}
        print(f"built in {time.perf_counter() - t0:.0f} s: {args.runs} runs; without telemetry "
              f"{sizes[bare]:.0f} MiB, with {args.samples} telemetry rows {sizes[full]:.0f} MiB")
        times: dict[tuple[str, Path], list[float]] = {}
        for r in range(args.rounds):
            for label, table, metric in exports:
                order = (bare, full) if r % 2 == 0 else (full, bare)
                texts = []
                for path in order:
                    elapsed, text = timed(path, table, metric)
                    times.setdefault((label, path), []).append(elapsed)
                    texts.append(text)
                assert texts[0] == texts[1], f"{label}: the two exports differ"
        print(f"{args.rounds} rounds alternating; seconds per export (median), identical output")
        print(f"{'export':<14} {'no telemetry':>13} {'telemetry':>10} {'ratio':>7}")
        worst = 0.0
        for label, _, _ in exports:
            a = statistics.median(times[(label, bare)])
            b = statistics.median(times[(label, full)])
            worst = max(worst, b / a)
            print(f"{label:<14} {a:>13.3f} {b:>10.3f} {b / a:>7.2f}")
        print(f"goal (ratio <= 1.2): {'met' if worst <= 1.2 else 'NOT met'} (worst {worst:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
