"""``dltop report`` at the scale of a real study (goal: ≤ 30 s, ≤ 300 MB RSS, HTML ≤ 10 MB).

A finished campaign of 10 000 configurations (2 frameworks × 2 models × 25 batch
sizes × 4 devices × 25 learning rates), one ok run each with its summary, 40 stored
iterations (2 warm-up) with times, and a few telemetry windows (host for every run,
GPU for GPU runs); run 1 is a long run (``--long`` iterations and a tenth as many
telemetry windows, with spikes) so that the downsampled series are exercised. The
database is built with bulk SQL (not timed); then ``dltop report`` runs in a
subprocess and the benchmark prints its wall time, CPU time and peak RSS
(``resource.getrusage(RUSAGE_CHILDREN)``) and the HTML file's size. ``--profile``
runs it under cProfile and prints where the CPU went (the report's own code vs the
summary table of :mod:`dltop.results`).

    .venv/bin/python benchmarks/report_scale.py [--lrs 25] [--long 100000] [--profile]
        [--keep DIR] [--src TREE]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scaledb

from dltop.catalog import RunStatus
from dltop.profiles.loader import parse
from dltop.store import connect
from dltop.store.rows import insert_jobs

PROFILE = scaledb.PROFILE + "lr = [{lrs}]\n"  # the scale benchmarks' matrix, x learning rates
ITERS = 40
WARMUP = 2
WINDOWS = 4
"""Telemetry windows of an ordinary run (host; and GPU on a GPU run)."""


def build(path: Path, n_lrs: int, long_iters: int) -> int:
    """The campaign described in the module docstring; returns its configuration count."""
    db = connect(path)
    conn = db.conn
    jobs = parse(PROFILE.format(batches=", ".join(str(8 * (k + 1)) for k in range(25)),
                                lrs=", ".join(f"{0.001 * (k + 1):g}" for k in range(n_lrs))),
                 "p.toml", "p").jobs
    jobs = [dataclasses.replace(j, iterations=ITERS - WARMUP, warmup=WARMUP) for j in jobs]
    conn.execute("begin")
    conn.execute("insert into campaigns (id, name, status, created_at, host, dltop_version) "
                 "values (1, 'scale', 'finished', '2026-11-23T00:00:00Z', 'host', '0')")
    insert_jobs(db, 1, 0, jobs, [RunStatus.OK] * len(jobs))  # as dltop stores a queue
    gpu = [j.device.kind == "gpu" for j in jobs]
    conn.executemany(
        "insert into runs (id, job_id, campaign_id, attempt, status, samples_per_iter, "
        "n_iterations, median_s, mean_s, p10_s, p90_s, cv, samples_per_s, noisy, "
        "concurrent_runs, contaminated, telemetry_simulated, tree_cpu_mean_pct, "
        "host_cpu_mean_pct, rss_peak_bytes, power_mean_w, joules_per_sample, device_name) "
        "values (?, ?, 1, 1, 'ok', ?, ?, ?, ?, ?, ?, 0.01, ?, 0, 0, 0, 0, 95.0, 40.0, "
        "1073741824, ?, ?, ?)",
        ((k + 1, k + 1, j.batch_size, long_iters if k == 0 else ITERS,
          _sec(k, j.batch_size), _sec(k, j.batch_size), 0.9 * _sec(k, j.batch_size),
          1.1 * _sec(k, j.batch_size), j.batch_size / _sec(k, j.batch_size),
          300.0 if g else None, 0.5 if g else None, "NVIDIA H100" if g else None)
         for k, (j, g) in enumerate(zip(jobs, gpu, strict=True))))

    def iters(run: int, n: int, sec: float, batch: int):  # type: ignore[no-untyped-def]
        t = 1000.0 * run
        for i in range(n):
            s = sec * (5 if i % 9973 == 17 else 1)  # a spike now and then
            t += s
            yield run, i, s, batch, int(i < WARMUP), 2.3 - 1e-5 * i, int(t * 1e9)

    conn.executemany("insert into iterations (run_id, idx, seconds, samples, warmup, loss, "
                     "t_mono_ns) values (?, ?, ?, ?, ?, ?, ?)",
                     (row for k, j in enumerate(jobs)
                      for row in iters(k + 1, long_iters if k == 0 else ITERS,
                                       _sec(k, j.batch_size), j.batch_size)))

    def windows(run: int) -> int:
        return max(WINDOWS, long_iters // 10) if run == 1 else WINDOWS

    conn.executemany(
        "insert into host_samples (run_id, t_start_mono_s, t_wall_s, n, cpu_mean_pct, "
        "cpu_max_core_pct, mem_used_bytes, swap_used_bytes, tree_cpu_pct, tree_rss_bytes, "
        "cpu_user_pct, cpu_system_pct, cpu_iowait_pct) "
        "values (?, ?, ?, 1, ?, 100, 4294967296, 0, 95, 1073741824, 30, 8, 0.5)",
        ((k + 1, 1000.0 * (k + 1) + t / 2, 1.7e9 + t / 2, 90 if t % 997 == 5 else 40)
         for k in range(len(jobs)) for t in range(windows(k + 1))))
    conn.executemany(
        "insert into gpu_samples (run_id, t_start_mono_s, t_wall_s, gpu_index, n, "
        "util_mean_pct, util_min_pct, util_max_pct, mem_used_max_bytes, power_mean_w, "
        "power_min_w, power_max_w, energy_j, temperature_max_c, sm_clock_mhz, simulated) "
        "values (?, ?, ?, 0, 5, 90, 80, 99, 1073741824, ?, 290, 310, 150, 60, 1500, 0)",
        ((k + 1, 1000.0 * (k + 1) + t / 2, 1.7e9 + t / 2, 600 if t % 997 == 5 else 300)
         for k in range(len(jobs)) if gpu[k] or k == 0 for t in range(windows(k + 1))))
    conn.executemany("insert into environment (run_id, host, framework, python_executable) "
                     "values (?, 'host', ?, '/usr/bin/python3')",
                     ((k + 1, j.framework) for k, j in enumerate(jobs)))
    conn.execute("commit")
    db.close()
    return len(jobs)


def _sec(k: int, batch: int) -> float:
    return 0.001 * batch * (1 + k % 7 / 100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lrs", type=int, default=25, help="learning rates (400 configurations each)")
    ap.add_argument("--long", type=int, default=100_000, help="iterations of run 1")
    ap.add_argument("--profile", action="store_true", help="run the report under cProfile")
    ap.add_argument("--keep", help="build the database (and write the page) in DIR, kept")
    ap.add_argument("--src", help="run the report of this source tree (its src/): e.g. "
                                  "`git archive f765465 src | tar -x -C DIR`, the baseline")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        db, prof = where / "scale.db", where / "report.prof"
        html = where / ("report-src.html" if args.src else "report.html")
        if not db.exists():
            t0 = time.perf_counter()
            n = build(db, args.lrs, args.long)
            print(f"built in {time.perf_counter() - t0:.0f} s: {n} configurations, "
                  f"{db.stat().st_size / 2**20:.0f} MiB")
        cmd = [sys.executable, *(["-m", "cProfile", "-o", str(prof)] if args.profile else []),
               "-m", "dltop", "report", "--db", str(db), "-o", str(html)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(args.src or Path(__file__).resolve().parents[1]) / "src"),
             os.environ.get("PYTHONPATH", "")])}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n")
            return 1
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        size = html.stat().st_size
        print(f"dltop report: wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS "
              f"{after.ru_maxrss / 1024:.0f} MB, HTML {size / 1e6:.2f} MB"
              f"{' (under cProfile)' if args.profile else ''}")
        ok = wall <= 30 and after.ru_maxrss / 1024 <= 300 and size <= 10e6
        print(f"goal (<= 30 s, <= 300 MB, <= 10 MB): {'met' if ok else 'NOT met'}")
        if args.profile:
            _shares(prof)
    return 0


def _shares(prof: Path) -> None:
    """Cumulative CPU of the report's stages, and the top functions by own time."""
    st = pstats.Stats(str(prof))
    total = st.total_tt  # type: ignore[attr-defined]
    stages = {"summary table (results/summary.py, bootstrap)": ("summary.py", "summary_table"),
              "config_results (results/aggregate.py)": ("aggregate.py", "config_results"),
              "figures' data (report/data.py build, less the two above)": ("data.py", "build"),
              "run traces (report/runs.py)": ("runs.py", "run_figures"),
              "page: specs, vl-convert, HTML (report/html.py)": ("html.py", "page")}
    cum = {}
    for (file, _, name), (_, _, _, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        for label, (f, n) in stages.items():
            if file.endswith(f) and name == n:
                cum[label] = max(cum.get(label, 0.0), ct)
    build = "figures' data (report/data.py build, less the two above)"
    cum[build] = cum.get(build, 0.0) - sum(cum.get(k, 0.0) for k in list(stages)[:2])
    print(f"profile: {total:.1f} s in all")
    for label in stages:
        print(f"  {label}: {cum.get(label, 0.0):.1f} s ({cum.get(label, 0.0) / total:.0%})")
    st.sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    raise SystemExit(main())
