"""Harness overhead: a bare PyTorch training loop vs the same work through ``dltop run``.

Both sides run in fresh processes with the same model (built by the runner's own
``torch_models``), batch, thread count and synthetic data. Rounds alternate
bare/dltop so machine noise hits both alike; the figure is the ratio of the
medians of per-run median seconds per iteration (dltop / bare). Goal: <= 1.01.

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 3] [--iterations 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CHILD_DIR = Path(__file__).resolve().parents[1] / "src" / "dltop" / "runners" / "child"

BARE = textwrap.dedent("""
    import json, sys, time
    import torch
    sys.path.insert(0, {child_dir!r})
    import torch_models
    torch.manual_seed(0)
    torch.set_num_threads({threads})
    torch.set_num_interop_threads({threads})
    model = torch_models.build({model!r})
    x, y = torch_models.synthetic_batch({model!r}, {batch}, torch.device("cpu"))
    loss_fn = torch_models.loss_fn({model!r})
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for i in range({total}):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    print(json.dumps(times[{warmup}:]))
""")

PROFILE = """
name = "harness-overhead"
[[matrix]]
frameworks = ["torch"]
models = ["{model}"]
batch_sizes = [{batch}]
devices = ["cpu:{threads}"]
iterations = {iterations}
warmup = {warmup}
timeout_s = 1800
"""

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def bare_median(model: str, batch: int, threads: int, iterations: int, warmup: int) -> float:
    code = BARE.format(child_dir=str(CHILD_DIR), model=model, batch=batch, threads=threads,
                       total=iterations + warmup, warmup=warmup)
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    return statistics.median(json.loads(out.stdout.strip().splitlines()[-1]))


def dltop_median(model: str, batch: int, threads: int, iterations: int, warmup: int,
                 workdir: Path) -> float:
    prof = workdir / "p.toml"
    prof.write_text(PROFILE.format(model=model, batch=batch, threads=threads,
                                   iterations=iterations, warmup=warmup))
    db = workdir / "bench.db"
    subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                    "--headless"], check=True, capture_output=True, text=True)
    conn = sqlite3.connect(db)
    try:
        (median,) = conn.execute(
            "select median_s from runs where status = 'ok' order by id desc limit 1").fetchone()
    finally:
        conn.close()
    return float(median)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="fcn-r:128,alexnet-r:128",
                    help="comma-separated model:batch pairs")
    args = ap.parse_args()
    print(f"threads={args.threads} iterations={args.iterations} warmup={args.warmup} "
          f"rounds={args.rounds} (alternating bare/dltop)")
    print(f"{'model':<10} {'batch':>5} {'bare s/iter':>12} {'dltop s/iter':>13} {'ratio':>7}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            model, batch_s = case.split(":")
            batch = int(batch_s)
            bare, harness = [], []
            for _ in range(args.rounds):
                bare.append(bare_median(model, batch, args.threads, args.iterations,
                                        args.warmup))
                harness.append(dltop_median(model, batch, args.threads, args.iterations,
                                            args.warmup, Path(tmp)))
            b, h = statistics.median(bare), statistics.median(harness)
            worst = max(worst, h / b)
            print(f"{model:<10} {batch:>5} {b:>12.5f} {h:>13.5f} {h / b:>7.3f}")
    print(f"worst ratio {worst:.3f} (goal <= 1.01): {'met' if worst <= 1.01 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
