"""Data-parallel scaling on this machine, and the supervisor's spawn-to-first-iteration latency.

Runs fcn-r (global batch fixed) as ``cpus:1`` (one process, one thread) and
``cpus:2`` (two gloo DDP ranks, one thread each, started by torchrun) through
``dltop run --json`` in one campaign, alternating for ``--rounds`` repeats, then prints the scaling
table (speedup and efficiency against ``cpus:1``). The latency is measured from
the ``run_started`` event to the first ``iteration`` event as this script
receives them (process start, interpreter and torch import, model build,
first step; for ``cpus:2`` also torchrun's agent and its rendezvous). The
launcher each device ran under (the runner's ``hello``) is printed with it.

    .venv/bin/python benchmarks/ddp_scaling.py [--batch 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROFILE = """
name = "ddp-scaling"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [{batch}]
devices = ["cpus:1", "cpus:2"]
repeats = {rounds}
iterations = {iterations}
warmup = 5
timeout_s = 1800
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "p.toml"
        prof.write_text(PROFILE.format(batch=args.batch, rounds=args.rounds,
                                       iterations=args.iterations))
        db = str(Path(tmp) / "b.db")
        proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--db", db,
                                 "--json"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        started: dict[int, tuple[float, str]] = {}
        latency: dict[str, list[float]] = {}
        for line in proc.stdout:
            now = time.monotonic()
            e = json.loads(line)
            if e["event"] == "run_started":
                started[e["run_id"]] = (now, e["device"])
            elif e["event"] == "iteration" and e["index"] == 0 and e["run_id"] in started:
                t0, dev = started.pop(e["run_id"])
                latency.setdefault(dev, []).append(now - t0)
        if proc.wait() != 0:
            print("dltop run failed", file=sys.stderr)
            return 1
        conn = sqlite3.connect(db)
        launchers = dict(conn.execute(
            "select j.device, json_extract(e.extra, '$.launcher') from runs r "
            "join jobs j on j.id = r.job_id join environment e on e.run_id = r.id"))
        conn.close()
        table = subprocess.run([sys.executable, "-m", "dltop", "export", "--db", db,
                                "--table", "scaling"], capture_output=True, text=True,
                               check=True).stdout
    print(f"fcn-r, global batch {args.batch}, {args.rounds} repeats x {args.iterations} "
          "iterations (repeats interleaved: cpus:1, cpus:2, cpus:1, ...)")
    print(table)
    for dev, xs in latency.items():
        print(f"spawn -> first iteration, {dev}: median {statistics.median(xs):.2f} s "
              f"(n={len(xs)}, min {min(xs):.2f}, max {max(xs):.2f}; "
              f"launcher: {launchers.get(dev) or 'none'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
