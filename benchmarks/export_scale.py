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
import dataclasses
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dltop.catalog import RunStatus
from dltop.profiles.loader import parse
from dltop.results import export
from dltop.store import connect
from dltop.store.rows import job_row

PROFILE = """
[[matrix]]
frameworks = ["torch", "tensorflow"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [{batches}]
devices = ["cpu:1", "cpu:2", "gpu:1", "gpu:2"]
batch_scaling = "per-device"
"""

EXPORTS = (("pivot, time", "pivot", "time"), ("pivot, cpu", "pivot", "cpu"))
SUMMARY = ("summary", "summary", "time")
"""Opt-in (``--summary``): its bootstrap intervals took minutes at 10 000 runs before issue
32; benchmarks/summary_scale.py times it now."""


def build(path: Path, n_runs: int) -> None:
    """A finished campaign of ``n_runs`` jobs, one ok run each, with summaries and iterations."""
    db = connect(path)
    conn = db.conn
    configs = parse(PROFILE.format(batches=", ".join(str(8 * (k + 1)) for k in range(25))),
                    "p.toml", "p").jobs  # 200 configurations
    repeats = -(-n_runs // len(configs))
    jobs = [dataclasses.replace(j, repeat=r) for r in range(repeats) for j in configs][:n_runs]
    conn.execute("begin")
    conn.execute("insert into campaigns (id, name, status, created_at, host, dltop_version) "
                 "values (1, 'scale', 'finished', '2026-11-23T00:00:00Z', 'host', '0')")
    rows = [job_row(1, k, RunStatus.OK, j) for k, j in enumerate(jobs)]
    cols = list(rows[0])
    conn.executemany(f"insert into jobs ({', '.join(cols)}) values "
                     f"({', '.join('?' * len(cols))})", ([r[c] for c in cols] for r in rows))
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
          "NVIDIA H100" if j.device.kind == "gpu" else None) for k, j in enumerate(jobs)))
    conn.executemany("insert into iterations (run_id, idx, seconds, samples, warmup, loss) "
                     "values (?, ?, ?, 64, ?, null)",
                     ((r, i, 0.1 + i / 1e4, int(i < 2)) for r in range(1, n_runs + 1)
                      for i in range(22)))
    conn.executemany("insert into environment (run_id, host, framework, python_executable) "
                     "values (?, 'host', ?, '/usr/bin/python3')",
                     ((k + 1, j.framework) for k, j in enumerate(jobs)))
    conn.execute("commit")
    db.close()


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
        build(bare, args.runs)
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
