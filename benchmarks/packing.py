"""What packing buys and costs: one campaign run one-at-a-time and the same one packed.

The same queue of ``cpu:1`` PyTorch jobs (fcn-r and alexnet-r, ``--repeats``
each) runs through ``dltop run`` twice, in alternating order over ``--rounds``:
once as shipped (one run at a time) and once with ``--pack`` (as many runs at
once as there are free CPUs, each pinned to its own). Printed side by side:
the campaign's wall time (what packing gains) and the median of the runs'
median s/iter (what sharing the host's memory and caches costs each run).

    .venv/bin/python benchmarks/packing.py [--rounds 2] [--repeats 2] [--iterations 20]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROFILE = """
name = "packing"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [128]
devices = ["cpu:1"]
repeats = {repeats}
iterations = {iterations}
warmup = 5
timeout_s = 1800
"""


def campaign(tmp: Path, tag: str, pack: bool) -> tuple[float, dict[str, float], int]:
    """Run the profile once; return (wall s, model -> median of run medians, max overlap)."""
    db = tmp / f"{tag}.db"
    argv = [sys.executable, "-m", "dltop", "run", str(tmp / "p.toml"), "--db", str(db),
            "--headless", "--no-telemetry"] + (["--pack"] if pack else [])
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"dltop run failed ({res.returncode}):\n{res.stderr}")
    conn = sqlite3.connect(db)
    rows = conn.execute("select j.model, r.median_s, r.concurrent_runs from runs r "
                        "join jobs j on j.id = r.job_id where r.status = 'ok'").fetchall()
    conn.close()
    by_model: dict[str, list[float]] = {}
    for model, median, _ in rows:
        by_model.setdefault(model, []).append(median)
    return (wall, {m: statistics.median(v) for m, v in by_model.items()},
            max(r[2] or 0 for r in rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=20)
    args = ap.parse_args()
    walls: dict[bool, list[float]] = {False: [], True: []}
    medians: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
    overlap = 0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "p.toml").write_text(PROFILE.format(repeats=args.repeats,
                                                         iterations=args.iterations))
        for rnd in range(args.rounds):
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for pack in order:
                wall, by_model, ov = campaign(Path(tmp), f"r{rnd}-{int(pack)}", pack)
                walls[pack].append(wall)
                overlap = max(overlap, ov) if pack else overlap
                for m, v in by_model.items():
                    medians[pack].setdefault(m, []).append(v)
    n_jobs = 2 * args.repeats
    print(f"{n_jobs} cpu:1 torch runs per campaign (fcn-r, alexnet-r; batch 128; "
          f"{args.iterations} iterations), {args.rounds} rounds alternating; "
          f"packed: up to {overlap + 1} runs at once")
    seq_w, pack_w = statistics.median(walls[False]), statistics.median(walls[True])
    print(f"{'':22}{'one at a time':>15}{'packed':>10}{'ratio':>8}")
    print(f"{'campaign wall s':22}{seq_w:15.1f}{pack_w:10.1f}{pack_w / seq_w:8.2f}")
    for m in sorted(medians[False]):
        a, b = statistics.median(medians[False][m]), statistics.median(medians[True][m])
        print(f"{m + ' s/iter':22}{a:15.4f}{b:10.4f}{b / a:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
