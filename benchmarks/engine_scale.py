"""A real ``dltop run`` with 100 000 queued jobs beside one with 150 (issue 32, item 3).

Goals at 100 000 jobs: engine peak RSS ≤ 80 MB, the first run started ≤ 3 s after
``dltop run``, per-job engine CPU as at 150. Each size is a profile of the cheapest
real work, a ``command`` job running ``echo x1`` once (one measured iteration, no
warm-up) repeated N times, run as a user runs it (``python -m dltop run PROFILE --db
... --json --no-telemetry``) with a fresh database. Measured from outside, on the
engine process only (its children's CPU is theirs):

- first run: wall seconds from the process start to the first ``run_started`` event
  (profile loading, preflight, storing every job included), and the engine's CPU
  seconds by then;
- per job: the engine's CPU from the first ``run_started`` to the ``--runs``-th
  ``run_finished``, divided by the runs;
- peak RSS: the engine's ``VmHWM`` after those runs (the whole process's peak);
- resume: the engine is then killed (SIGKILL, as a crash) and ``dltop run --resume``
  takes the campaign over: wall seconds to its first ``run_started`` and its peak RSS.

Then the resumed engine is interrupted (SIGINT: the rest of the queue is cancelled).
Sizes alternate round by round, so a busy moment on a shared machine lands on both.

    .venv/bin/python benchmarks/engine_scale.py [--sizes 150,100000] [--runs 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROFILE = """
[[matrix]]
frameworks = ["command"]
models = ["echo"]
batch_sizes = [1]
devices = ["cpu:1"]
warmup = 0
iterations = 1
repeats = {repeats}
command = ["echo", "x1"]
iteration_regex = 'x(?P<ms>[0-9.]+)'
"""

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process so far (not its children's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def one(tmp: Path, n: int, runs: int, k: int) -> dict[str, float]:
    """One ``dltop run`` of ``n`` queued jobs, stopped after ``runs`` runs."""
    prof = tmp / f"q{n}.toml"
    prof.write_text(PROFILE.format(repeats=n))
    db = tmp / f"q{n}-{k}.db"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                             "--json", "--no-telemetry"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=tmp)
    assert proc.stdout is not None
    out: dict[str, float] = {}
    finished = 0
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event["event"] == "run_started" and "first_s" not in out:
                out["first_s"] = time.perf_counter() - t0
                out["first_cpu_s"] = cpu_s(proc.pid)
            elif event["event"] == "run_finished":
                finished += 1
                if finished == runs:
                    out["per_job_ms"] = (cpu_s(proc.pid) - out["first_cpu_s"]) / runs * 1e3
                    out["rss_mb"] = peak_rss_mb(proc.pid)
                    break
    finally:
        proc.kill()
        proc.wait(timeout=120)
    if len(out) != 4:
        raise RuntimeError(f"{n} jobs: the engine ended after {finished} runs")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", "--resume", "--db", str(db),
                             "--json", "--no-telemetry"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=tmp)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if json.loads(line)["event"] == "run_started":
                out["resume_s"] = time.perf_counter() - t0
                out["resume_rss_mb"] = peak_rss_mb(proc.pid)
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    if len(out) != 6:
        raise RuntimeError(f"{n} jobs: the resumed engine started no run")
    for path in tmp.glob(f"q{n}-{k}.db*"):
        path.unlink()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="150,100000", help="queued jobs of each campaign")
    ap.add_argument("--runs", type=int, default=30, help="runs measured per campaign")
    ap.add_argument("--rounds", type=int, default=2, help="campaigns per size, alternating")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    got: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for n in sizes if k % 2 == 0 else sizes[::-1]:
                got[n].append(one(Path(tmp), n, args.runs, k))
    print(f"dltop run, command jobs (echo), {args.runs} runs each, {args.rounds} rounds; "
          "medians (min-max)")
    cols = (("first_s", "first run s"), ("first_cpu_s", "CPU by then s"),
            ("per_job_ms", "engine CPU/job ms"), ("rss_mb", "peak RSS MB"),
            ("resume_s", "resume: first run s"), ("resume_rss_mb", "resume: RSS MB"))
    print(f"{'queued jobs':>12}" + "".join(f"{title:>21}" for _, title in cols))
    for n in sizes:
        cells = []
        for key, _ in cols:
            xs = [r[key] for r in got[n]]
            cells.append(f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})")
        print(f"{n:>12}" + "".join(f"{c:>21}" for c in cells))
    big = max(sizes)
    first = statistics.median(r["first_s"] for r in got[big])
    rss = statistics.median(r["rss_mb"] for r in got[big])
    print(f"goals at {big}: first run <= 3 s: {'met' if first <= 3 else 'NOT met'} "
          f"({first:.2f} s); peak RSS <= 80 MB: {'met' if rss <= 80 else 'NOT met'} "
          f"({rss:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
