"""``dltop export --table summary`` at 10 000 configurations × 40 iterations (goal ≤ 10 s wall).

A finished campaign, built with bulk SQL (not timed): 400 configurations of the
export_scale profile × 25 learning rates = 10 000 configurations, each with
``--runs`` ok runs (summary, 2 warm-up and ``--iterations`` measured iterations
drawn from a log-normal around 0.1 s, an environment row). The summary table is
exported as Markdown in a fresh process, ``--rounds`` times, as ``dltop export``
does (``export.results_text``; a tree without it: ``render(results_table(...))``):
wall and CPU seconds and peak RSS (medians).

The former pure-Python bootstrap (tests/results/bootstrap_ref.py, 2 000
resamples per configuration) would take minutes here (issue 32: 108 s CPU, ~4 min
wall at 10 000 configurations), so it is timed on ``--sample`` configurations
side by side with the new one on the same data and extrapolated; the printed
differences of the intervals are in units of the former interval's width. The
sampled configurations' intervals are also computed together, as the table does
(``bootstrap_batch.median_cis``), and compared with one at a time.

``--before TREE`` times the export of another source tree (``TREE/src``, e.g. the
base commit unpacked with ``git archive``) on the same database, alternating
rounds with this one, and says whether the two Markdown tables are identical.

    .venv/bin/python benchmarks/summary_scale.py [--configs 10000] [--iterations 40] [--runs 1]
        [--rounds 3] [--sample 200] [--before TREE]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scaledb

from dltop.catalog import RunStatus
from dltop.profiles.loader import parse
from dltop.store import connect
from dltop.store.rows import job_row


def build(path: Path, n_configs: int, n_iters: int, n_runs: int) -> None:
    """A finished campaign of ``n_configs`` configurations × ``n_runs`` ok runs."""
    db = connect(path)
    conn = db.conn
    base = parse(scaledb.PROFILE.format(batches=", ".join(str(8 * (k + 1)) for k in range(25))),
                 "p.toml", "p").jobs  # 400 configurations
    configs = [dataclasses.replace(j, lr=0.01 * (1 + k)) for k in range(-(-n_configs // 400))
               for j in base][:n_configs]
    jobs = [dataclasses.replace(j, repeat=r) for r in range(n_runs) for j in configs]
    conn.execute("begin")
    conn.execute("insert into campaigns (id, name, status, created_at, host, dltop_version) "
                 "values (1, 'summary', 'finished', '2026-11-23T00:00:00Z', 'host', '0')")
    rows = [job_row(1, k, RunStatus.OK, j) for k, j in enumerate(jobs)]
    cols = list(rows[0])
    conn.executemany(f"insert into jobs ({', '.join(cols)}) values "
                     f"({', '.join('?' * len(cols))})", ([r[c] for c in cols] for r in rows))
    rng = random.Random(32)
    seconds = [[rng.lognormvariate(-2.3, 0.05) for _ in range(n_iters)] for _ in jobs]
    conn.executemany(
        "insert into runs (id, job_id, campaign_id, attempt, status, samples_per_iter, "
        "n_iterations, median_s, mean_s, p10_s, p90_s, cv, samples_per_s, noisy, "
        "concurrent_runs, contaminated, telemetry_simulated, tree_cpu_mean_pct, "
        "host_cpu_mean_pct, rss_peak_bytes, device_name) "
        "values (?, ?, 1, 1, 'ok', 64, ?, ?, ?, 0.09, 0.11, 0.05, ?, 0, 0, 0, 0, 95.0, 40.0, "
        "1073741824, ?)",
        ((k + 1, k + 1, n_iters, statistics.median(s), statistics.fmean(s),
          64 / statistics.median(s), "NVIDIA H100" if j.device.kind == "gpu" else None)
         for k, (j, s) in enumerate(zip(jobs, seconds, strict=True))))
    conn.executemany("insert into iterations (run_id, idx, seconds, samples, warmup, loss) "
                     "values (?, ?, ?, 64, ?, null)",
                     ((k + 1, i, s[i - 2] if i >= 2 else 0.5, int(i < 2))
                      for k, s in enumerate(seconds) for i in range(n_iters + 2)))
    conn.executemany("insert into environment (run_id, host, framework, python_executable) "
                     "values (?, 'host', ?, '/usr/bin/python3')",
                     ((k + 1, j.framework) for k, j in enumerate(jobs)))
    conn.execute("commit")
    db.close()


def measure(path: Path) -> dict[str, float | str]:
    """One fresh process: the summary exported as Markdown."""
    from dltop.results import export

    db = connect(path, create=False)
    wall, cpu = time.perf_counter(), time.process_time()
    if hasattr(export, "results_text"):  # what dltop export runs (--before: older trees)
        text = export.results_text(db, 1, "md", "summary")
    else:
        text = export.render(export.results_table(db, 1, "summary"), "md")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "chars": len(text),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def side_by_side(path: Path, sample: int) -> None:
    """New and former interval on ``sample`` configurations' data, alternating."""
    from dltop.results import bootstrap, bootstrap_batch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "results"))
    import bootstrap_ref  # the tests' reference, not shipped in src

    from dltop.results.aggregate import config_results

    db = connect(path, create=False)
    results = [r for r in config_results(db, 1) if r.runs]
    picked = random.Random(1).sample(results, min(sample, len(results)))
    new_s, old_s, diffs = 0.0, 0.0, []
    for res in picked:
        data = [list(r.iterations) for r in res.runs]
        t = time.process_time()
        new = bootstrap.median_ci(data)
        new_s += time.process_time() - t
        t = time.process_time()
        old = bootstrap_ref.median_ci(data)
        old_s += time.process_time() - t
        width = old[1] - old[0]
        diffs += [abs(n - o) / width for n, o in zip(new, old, strict=True) if width > 0]
    k = len(picked)
    t = time.process_time()
    together = bootstrap_batch.median_cis([[list(r.iterations) for r in res.runs]
                                           for res in picked])
    together_s = time.process_time() - t
    alone = [bootstrap.median_ci([list(r.iterations) for r in res.runs]) for res in picked]
    print(f"intervals on {k} configurations, side by side (CPU ms per configuration): "
          f"former {old_s / k * 1e3:.2f}, new {new_s / k * 1e3:.3f}, "
          f"ratio {old_s / max(new_s, 1e-9):.0f}x; former extrapolated to {len(results)}: "
          f"{old_s / k * len(results):.0f} s CPU")
    print(f"the same {k} together (the table's batch): {together_s / k * 1e3:.3f} ms CPU per "
          f"configuration; identical to one at a time: {'yes' if together == alone else 'NO'}")
    print(f"|new - former| / former width: median {statistics.median(diffs):.3f}, "
          f"max {max(diffs):.3f} (Monte-Carlo error of the former, 2 000 resamples)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", type=int, default=10_000)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--runs", type=int, default=1, help="ok runs per configuration")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--before", metavar="TREE",
                    help="also time TREE/src's export, alternating rounds")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "summary.db"
        t0 = time.perf_counter()
        build(path, args.configs, args.iterations, args.runs)
        print(f"built in {time.perf_counter() - t0:.0f} s: {args.configs} configurations × "
              f"{args.runs} run(s) × {args.iterations} iterations "
              f"({path.stat().st_size / 2**20:.0f} MiB)")
        trees: dict[str, dict[str, str]] = {"": dict(os.environ)}
        if args.before:
            trees["before: "] = {**os.environ, "PYTHONPATH": str(Path(args.before) / "src")}
        got: dict[str, list[dict[str, float | str]]] = {label: [] for label in trees}
        for _ in range(args.rounds):
            for label, env in trees.items():
                got[label].append(json.loads(subprocess.run(
                    [sys.executable, __file__, "--measure", str(path)], check=True,
                    capture_output=True, text=True, env=env).stdout))
        for label, rounds in got.items():
            med = {k: statistics.median(float(g[k]) for g in rounds)
                   for k in ("wall_s", "cpu_s", "rss_mb", "chars")}
            print(f"{label}export --table summary, {args.rounds} fresh processes (medians): "
                  f"{med['wall_s']:.2f} s wall, {med['cpu_s']:.2f} s CPU, "
                  f"{med['rss_mb']:.0f} MB peak RSS, {med['chars'] / 2**20:.1f} MiB of Markdown")
            if not label:
                print(f"goal (<= 10 s wall): {'met' if med['wall_s'] <= 10 else 'NOT met'}")
        if args.before:
            same = len({g["sha256"] for rounds in got.values() for g in rounds}) == 1
            print(f"Markdown identical to before's in every round: {'yes' if same else 'NO'}")
        side_by_side(path, args.sample)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
