"""The highest request rate dltop's client holds with dispatch lag p99 <= 2 ms (issue 41),
for ``benchmarks/serve_client.py``: a rate ladder against its fake server.

Rates double from the start rate while the client holds them, and halve while it does not
(down to ``min_rate``), until one rate held and the next did not. Then the rate is
bisected between the two ``bisections`` times. A rate is held when the measured
requests' dispatch lag p99 is at most 2 ms. Each step sends enough measured requests for
a p99 under the project's percentile rule (:func:`dltop.results.convergence.min_samples`:
100), and at least ``seconds`` of arrivals. Beside each step, a bare asyncio loop's
lateness p99 at the same arrivals, with no requests sent: this is the machine's floor.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from dltop.results.convergence import min_samples

LAG_GOAL_S = 0.002
P99_REQUESTS = min_samples(99)


@dataclass(frozen=True)
class Step:
    """One rate of the ladder, as the client ran it."""

    rate_per_s: float
    requests: int
    lag_p99_ms: float
    bare_p99_ms: float
    achieved_rate_per_s: float
    processes: int
    cpu_per_chunk_us: float

    @property
    def held(self) -> bool:
        return self.lag_p99_ms <= 1e3 * LAG_GOAL_S


Run = Callable[[float, int], tuple[float, float, int, float]]
"""(rate, measured requests) -> (lag p99 ms, achieved rate, client processes, CPU us per
chunk) of one run of the client."""

FLOOR = """
import asyncio, json, random, sys, time
rate, n = float(sys.argv[1]), int(sys.argv[2])
async def main():
    rng, t, late = random.Random(0), 0.0, []
    start = time.monotonic()
    for _ in range(n):
        await asyncio.sleep(max(0.0, start + t - time.monotonic()))
        late.append(time.monotonic() - start - t)
        t += rng.expovariate(rate)
    print(json.dumps(late))
asyncio.run(main())
"""
"""A bare asyncio loop sleeping to Poisson arrivals: the machine's own lateness, the
floor under any client's dispatch lag."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))]


def floor_lag_p99_ms(rate: float, n: int) -> float:
    res = subprocess.run([sys.executable, "-c", FLOOR, str(rate), str(n)],
                         capture_output=True, text=True, check=True)
    return 1e3 * percentile(json.loads(res.stdout), 99)


def ladder(name: str, run: Run, start: float, seconds: float, bisections: int,
           min_rate: float, max_rate: float,
           floor: Callable[[float, int], float] = floor_lag_p99_ms
           ) -> tuple[list[Step], float | None]:
    """The steps run and the highest rate held (None: not even ``min_rate``);
    ``floor(rate, n)``: the bare loop's lateness p99 in ms beside each step."""
    print(f"\nrate ladder, {name} (dispatch lag p99 <= {1e3 * LAG_GOAL_S:g} ms; each "
          f"step >= {P99_REQUESTS} measured requests):")
    print(f"{'asked/s':>9} {'requests':>8} {'processes':>9} {'achieved/s':>10} "
          f"{'lag p99 ms':>10} {'bare loop p99':>13} {'CPU us/chunk':>12} {'held':>4}",
          flush=True)
    steps: list[Step] = []

    def step(rate: float) -> bool:
        n = max(P99_REQUESTS, math.ceil(rate * seconds))
        bare = floor(rate, n)
        lag, achieved, procs, cpu = run(rate, n)
        s = Step(rate, n, lag, bare, achieved, procs, cpu)
        steps.append(s)
        print(f"{rate:9.4g} {n:8d} {procs:9d} {achieved:10.1f} {lag:10.3f} {bare:13.3f} "
              f"{cpu:12.1f} {'yes' if s.held else 'no':>4}", flush=True)
        return s.held

    lo: float | None = None
    hi: float | None = None
    rate = start
    if step(rate):
        lo = rate
        while hi is None and rate * 2 <= max_rate:
            rate *= 2
            if step(rate):
                lo = rate
            else:
                hi = rate
    else:
        hi = rate
        while lo is None and rate / 2 >= min_rate:
            rate /= 2
            if step(rate):
                lo = rate
            else:
                hi = rate
    if lo is not None and hi is not None:
        for _ in range(bisections):
            mid = (lo + hi) / 2
            if step(mid):
                lo = mid
            else:
                hi = mid
    if lo is None:
        print(f"{name}: no rate from {min_rate:g}/s held")
    elif hi is None:
        print(f"{name}: held up to {lo:g}/s, the ladder's top (--ladder-max)")
    else:
        print(f"{name}: held {lo:.4g}/s, not {hi:.4g}/s")
    return steps, lo
