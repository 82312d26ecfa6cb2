"""Harness overhead: a bare training loop vs the same work through ``dltop run``.

For each framework (PyTorch, TensorFlow, CNTK, JAX) both sides run in fresh
processes with the same model (built by the runner's own model module), batch,
thread settings, CPU affinity and synthetic data; the bare CNTK loop runs under
the same interpreter and ``LD_LIBRARY_PATH`` as the CNTK runner. Rounds
pair the two sides back to back on the same pinned CPUs (checked: the runner's stored
affinity against the bare loop's), the order alternating per round so a drift in
machine speed favours neither; the figure is the ratio of the medians of per-run median
seconds per iteration (dltop / bare), each round's ratio printed, and beside it the
CPU seconds per iteration (bare: process_time over its measured iterations; dltop:
the runner tree's sampled mean CPU times its mean iteration).
Goal: <= 1.01 for each framework.

``--device gpu`` (PyTorch only): both sides on one CUDA GPU (``gpu:1``), the bare
loop with the runner's CUDA settings (cuDNN benchmark on, TF32 off at fp32) and a
``torch.cuda.synchronize()`` ending each step, as the runner's.

Transformers (PyTorch; ``--cases gpt-tiny:4``, ``--device gpu --cases gpt2-small:16``):
the bare loop builds the decoder with ``torch_lm`` at the model's default
``seq_len`` and trains it with AdamW (lr 3e-4, no weight decay; fused on CUDA, as
the runner's ``torch_optim``), the dltop profile names the same optimizer;
``--precision bf16`` runs both sides under bf16 autocast.

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 3] [--iterations 30]
        [--frameworks torch,tensorflow,cntk] [--cases fcn-r:128,alexnet-r:128]
        [--device cpu|gpu] [--precision fp32|bf16] [--rounds-out FILE]

``--rounds-out FILE`` keeps the raw figures behind each printed ratio and interval: a
JSON list, rewritten after every case, with each round's bare and dltop median s/iter.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_bare import bare_command, is_lm

PROFILE = """
name = "harness-overhead"
[[matrix]]
frameworks = ["{framework}"]
models = ["{model}"]
batch_sizes = [{batch}]
devices = ["{device}"]
iterations = {iterations}
warmup = {warmup}
min_time_s = 0
timeout_s = 1800
precision = "{precision}"
{extra}"""
"""``min_time_s = 0``: the bare loop runs exactly ``iterations``, and so must dltop."""

LM_KEYS = 'optimizer = "adamw"\nlr = 0.0003\n'
"""The transformers' optimizer, in the dltop profile as in the bare loop."""


def _affinity(threads: int) -> list[int]:
    """The CPUs dltop pins a cpu:N job to (physical cores first), for the bare loop too."""
    from dltop.jobs.environment import core_order

    return list(core_order()[:threads])


def bare_median(framework: str, model: str, batch: int, threads: int, iterations: int,
                warmup: int, gpu: bool = False, precision: str = "fp32") -> Side:
    """One bare loop (harness_bare.py) of ``iterations`` measured steps: its Side."""
    affinity = [] if gpu else _affinity(threads)
    argv, env = bare_command(framework, model, batch, threads, warmup,
                             f"range({iterations + warmup})", affinity, gpu, precision)
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return Side(statistics.median(got["times"]), float(got["cpu_s"]),
                None if gpu else tuple(affinity))


def dltop_median(framework: str, model: str, batch: int, threads: int, iterations: int,
                 warmup: int, workdir: Path, gpu: bool = False,
                 precision: str = "fp32") -> Side:
    prof = workdir / "p.toml"
    prof.write_text(PROFILE.format(framework=framework, model=model, batch=batch,
                                   device="gpu:1" if gpu else f"cpu:{threads}",
                                   iterations=iterations, warmup=warmup, precision=precision,
                                   extra=LM_KEYS if is_lm(model) else ""))
    db = workdir / "bench.db"
    subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                    "--headless"], check=True, capture_output=True, text=True)
    conn = sqlite3.connect(db)
    try:
        median, mean, tree_pct, affinity = conn.execute(
            "select median_s, mean_s, tree_cpu_mean_pct, cpu_affinity from runs "
            "where status = 'ok' order by id desc limit 1").fetchone()
    finally:
        conn.close()
    # The runner's process tree's mean CPU over the measured window (the sampler's host
    # readings, 100 = one core) times the mean iteration: its CPU seconds per iteration,
    # beside the bare loop's process_time over its measured iterations.
    cpu = None if tree_pct is None else float(tree_pct) / 100.0 * float(mean)
    pinned = tuple(int(c) for c in str(affinity).split(",")) if affinity else None
    return Side(float(median), cpu, pinned)


@dataclass(frozen=True)
class Side:
    """One side of a round: its median s/iter, CPU s/iter and the CPUs it was pinned to."""

    median_s: float
    cpu_s: float | None
    affinity: tuple[int, ...] | None


def ratio_interval(bare: list[float], harness: list[float],
                   resamples: int = 2000) -> tuple[float, float]:
    """95 % interval of median(harness) / median(bare), the rounds resampled in pairs
    (a round's two sides ran back to back, so they share its machine noise)."""
    rng = random.Random(0)
    n = len(bare)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(statistics.median(harness[i] for i in idx)
                      / statistics.median(bare[i] for i in idx))
    ratios.sort()
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def write_rounds(path: Path, cases: list[dict[str, Any]]) -> None:
    """Rewrite PATH with every finished case's per-round medians (``--rounds-out``).

    Written whole to a temporary file and renamed, so a run stopped mid-case leaves the
    cases it finished.
    """
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(cases, indent=1) + "\n")
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="fcn-r:128,alexnet-r:128",
                    help="comma-separated model:batch pairs")
    ap.add_argument("--frameworks", default="torch,tensorflow,cntk")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                    help="gpu: both sides on one CUDA GPU (PyTorch only)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="both sides' precision (bf16: autocast, as the runner)")
    ap.add_argument("--rounds-out", type=Path, metavar="FILE",
                    help="write each case's per-round medians (JSON) to FILE")
    args = ap.parse_args()
    gpu = args.device == "gpu"
    if gpu and args.frameworks != "torch":
        ap.error("--device gpu measures PyTorch only: add --frameworks torch")
    print(f"threads={args.threads} iterations={args.iterations} warmup={args.warmup} "
          f"rounds={args.rounds} (paired rounds, order alternating)")
    print(f"{'framework':<11} {'model':<10} {'batch':>5} {'bare s/iter':>12} "
          f"{'dltop s/iter':>13} {'ratio':>7}")
    worst: dict[str, float] = {}
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for framework in args.frameworks.split(","):
            for case in args.cases.split(","):
                model, batch_s = case.split(":")
                batch = int(batch_s)
                bare, harness, bare_cpu, harness_cpu = [], [], [], []
                for i in range(args.rounds):
                    # Each round's two sides back to back on the same pinned CPUs, the
                    # order alternating so a drift in machine speed favours neither.
                    sides: dict[str, Side] = {}
                    for side in (("bare", "dltop") if i % 2 == 0 else ("dltop", "bare")):
                        sides[side] = (
                            bare_median(framework, model, batch, args.threads,
                                        args.iterations, args.warmup, gpu, args.precision)
                            if side == "bare" else
                            dltop_median(framework, model, batch, args.threads,
                                         args.iterations, args.warmup, Path(tmp), gpu,
                                         args.precision))
                    sb, sd = sides["bare"], sides["dltop"]
                    if sb.affinity != sd.affinity:
                        print(f"  round {i + 1}: NOT paired: bare on CPUs {sb.affinity}, "
                              f"dltop's runner on {sd.affinity}", flush=True)
                    bare.append(sb.median_s)
                    harness.append(sd.median_s)
                    bare_cpu.append(sb.cpu_s)
                    harness_cpu.append(sd.cpu_s)
                    cpu_ratio = (f"{sd.cpu_s / sb.cpu_s:.3f}" if sd.cpu_s and sb.cpu_s
                                 else "n/a")
                    print(f"  round {i + 1} ({'bare first' if i % 2 == 0 else 'dltop first'},"
                          f" CPUs {sd.affinity}): wall ratio {sd.median_s / sb.median_s:.3f}"
                          f", CPU/iter ratio {cpu_ratio}", flush=True)
                b, h = statistics.median(bare), statistics.median(harness)
                worst[framework] = max(worst.get(framework, 0.0), h / b)
                print(f"{framework:<11} {model:<10} {batch:>5} {b:>12.5f} {h:>13.5f} "
                      f"{h / b:>7.3f}", flush=True)
                lo, hi = ratio_interval(bare, harness)
                print(f"{'':<11} 95% CI of the ratio [{lo:.3f}, {hi:.3f}] (bootstrap "
                      f"over {len(bare)} rounds)", flush=True)
                pairs = [(c, d) for c, d in zip(bare_cpu, harness_cpu, strict=True)
                         if c and d]
                if len(pairs) >= 2:
                    clo, chi = ratio_interval([c for c, _ in pairs], [d for _, d in pairs])
                    cb = statistics.median(c for c, _ in pairs)
                    cd = statistics.median(d for _, d in pairs)
                    print(f"{'':<11} CPU s/iter: bare {cb:.5f}, dltop {cd:.5f} (runner tree,"
                          f" sampled), ratio {cd / cb:.3f} [{clo:.3f}, {chi:.3f}]", flush=True)
                if args.rounds_out is not None:
                    cases.append({"framework": framework, "model": model, "batch": batch,
                                  "device": args.device, "precision": args.precision,
                                  "threads": args.threads, "iterations": args.iterations,
                                  "warmup": args.warmup, "bare_s": bare, "dltop_s": harness,
                                  "bare_cpu_s": bare_cpu, "dltop_cpu_s": harness_cpu,
                                  "ratio": h / b, "ci95": [lo, hi]})
                    write_rounds(args.rounds_out, cases)
    for framework, w in worst.items():
        print(f"{framework}: worst ratio {w:.3f} (goal <= 1.01): "
              f"{'met' if w <= 1.01 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
