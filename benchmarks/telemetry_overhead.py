"""Telemetry overhead: dltop's sampler vs glances, CPU seconds per wall second.

dltop: the real Sampler with 8 fake GPUs whose every simulated NVML call blocks
0.4 ms (host and the sampler's own process tree sampled at 2 Hz, windows
written to a temporary SQLite file), measured as process CPU time while the
main thread sleeps. glances: ``glances --stdout cpu.total,mem.percent -t
1/rate`` in a subprocess, CPU time read with psutil after a start-up grace.
Goal: ratio dltop/glances <= 0.5, and 10 Hz achieved.

    .venv/bin/pip install glances   # benchmark-only dependency
    .venv/bin/python benchmarks/telemetry_overhead.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler


def dltop_cpu(rate: float, seconds: float, db_dir: Path) -> tuple[float, float, int]:
    db = connect(db_dir / f"t{rate:g}.db")
    sampler = Sampler(FakeGpuBackend(8, latency_s=0.0004),
                      Store(db).telemetry.write_batch, gpu_hz=rate, host_hz=min(rate, 2.0))
    sampler.begin_run(1, os.getpid(), tuple(range(8)))
    sampler.start()
    time.sleep(1.0)  # past start-up
    c0, t0, ticks0 = time.process_time(), time.monotonic(), sampler.ticks
    time.sleep(seconds)
    c1, t1, ticks1 = time.process_time(), time.monotonic(), sampler.ticks
    sampler.stop()
    return (c1 - c0) / (t1 - t0), (ticks1 - ticks0) / (t1 - t0), sampler.missed_ticks


def glances_cpu(rate: float, seconds: float) -> float | None:
    exe = shutil.which("glances") or str(Path(sys.executable).with_name("glances"))
    if not Path(exe).exists():
        return None
    proc = subprocess.Popen([exe, "--stdout", "cpu.total,mem.percent", "-t", f"{1 / rate:g}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(4.0)  # glances start-up is not the steady-state cost
        p = psutil.Process(proc.pid)
        c0 = sum(p.cpu_times()[:2])
        t0 = time.monotonic()
        time.sleep(seconds)
        c1 = sum(p.cpu_times()[:2])
        return (c1 - c0) / (time.monotonic() - t0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    print("8 fake GPUs, 0.4 ms per simulated NVML call; CPU s per wall s over "
          f"{args.seconds:g} s")
    print(f"{'rate':>6} {'dltop cpu':>10} {'achieved Hz':>12} {'missed':>7} "
          f"{'glances cpu':>12} {'ratio':>7}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (1.0, 10.0):
            d, hz, missed = dltop_cpu(rate, args.seconds, Path(tmp))
            g = glances_cpu(rate, args.seconds)
            ratio = d / g if g else float("nan")
            ok = ok and (g is not None and ratio <= 0.5)
            if rate == 10.0:
                ok = ok and hz >= 9.5
            gtxt = f"{g:.4f}" if g is not None else "missing"
            print(f"{rate:>5g}Hz {d:>10.4f} {hz:>12.2f} {missed:>7} {gtxt:>12} {ratio:>7.3f}")
    print(f"goal (ratio <= 0.5 and 10 Hz achieved): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
