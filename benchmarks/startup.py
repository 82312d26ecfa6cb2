"""Start-up time of the quick commands, over a bare ``python -c pass`` (issue 20, item 5).

Each command runs as a user runs it (the ``dltop`` console script beside this
interpreter, else ``python -m dltop``) against a small real database (one campaign
of 16 jobs, each with a finished run of 40 iterations), and is timed as a whole
process, like hyperfine: ``--rounds`` pairs of (``python -c pass``, the command), the
order inside a pair alternating so that drift hits both alike. Printed per command:
median wall ms, the median of the paired differences (the overhead over bare
Python) with a 95 % bootstrap confidence interval, and pass/fail of the median
overhead against the 150 ms goal.

    .venv/bin/python benchmarks/startup.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_MS = 150.0
COMMANDS = (("--version",), ("status",), ("runs",), ("export",))


def build_db(path: Path) -> None:
    from dltop.profiles.loader import parse
    from dltop.results.stats import summarize_run
    from dltop.store import Store, connect

    store = Store(connect(path))
    prof = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r", "lstm"]\n'
                 'batch_sizes = [8, 16]\ndevices = ["cpu:1", "cpu:2"]\nrepeats = 2\n',
                 "bench.toml", "bench")
    cid = store.create_campaign("bench", ["bench.toml"], ["dltop"], "h", 1, None)
    rng = random.Random(0)
    for job_id in store.add_jobs(cid, prof.jobs):
        run_id = store.start_run(job_id, cid, 1, "", 8)
        seconds = [0.01 + rng.random() * 1e-3 for _ in range(40)]
        store.add_iterations(run_id, [{"idx": i, "seconds": s, "samples": 8, "warmup": 0,
                                       "loss": None} for i, s in enumerate(seconds)])
        store.finish_run(run_id, job_id, "ok", summarize_run(seconds, 8).to_columns())
    store.set_campaign_status(cid, "finished")
    store.db.conn.close()


def dltop_argv() -> list[str]:
    script = Path(sys.executable).with_name("dltop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dltop"]


def wall_s(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return time.perf_counter() - t0


def bootstrap_ci(diffs: list[float], n: int = 2000) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median of ``diffs``."""
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40, help="pairs per command (40)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dltop-startup-"))
    db = tmp / "bench.db"
    build_db(db)
    env = {**os.environ, "DLTOP_DB": str(db)}
    bare = [sys.executable, "-c", "pass"]
    dltop = dltop_argv()
    for argv in (bare, *(dltop + list(c) for c in COMMANDS)):  # warm the page cache
        wall_s(argv, env)
    print(f"{args.rounds} alternating pairs per command; bare = {' '.join(bare)}; "
          f"dltop = {' '.join(dltop)}; database {db.stat().st_size // 1024} KiB")
    print(f"{'command':<16} {'median ms':>10} {'bare ms':>8} {'overhead ms':>12} "
          f"{'95% CI':>15}  goal <= {GOAL_MS:.0f} ms")
    failed = 0
    for cmd in COMMANDS:
        own, base, diffs = [], [], []
        for r in range(args.rounds):
            pair = ((bare, base), (dltop + list(cmd), own))
            for argv, into in (pair if r % 2 == 0 else pair[::-1]):
                into.append(wall_s(argv, env))
            diffs.append(own[-1] - base[-1])
        over = statistics.median(diffs) * 1000
        lo, hi = (x * 1000 for x in bootstrap_ci(diffs))
        ok = over <= GOAL_MS
        failed += not ok
        print(f"{'dltop ' + cmd[0]:<16} {statistics.median(own) * 1000:10.1f} "
              f"{statistics.median(base) * 1000:8.1f} {over:12.1f} "
              f"{f'[{lo:.1f}, {hi:.1f}]':>15}  {'pass' if ok else 'FAIL'}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
