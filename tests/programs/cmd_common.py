"""Shared by the cmd_* example programs: steps of known length, and the truth file.

Each program takes ``STEPS [TRUTH]``: how many steps (-1: never stop) and a
file that receives each step's measured seconds (``time.perf_counter``), one per
line, flushed at once; a test compares what dltop stored with it.
"""

import sys
import time


def steps_and_truth():
    steps = int(sys.argv[1])
    truth = open(sys.argv[2], "w") if len(sys.argv) > 2 else None
    return steps, truth


def indices(steps):
    i = 0
    while steps < 0 or i < steps:
        yield i
        i += 1


def step(i, truth=None):
    """One training step: sleeps 20, 30 or 40 ms; returns its measured seconds."""
    t0 = time.perf_counter()
    time.sleep(0.02 + 0.01 * (i % 3))
    dt = time.perf_counter() - t0
    record(truth, dt)
    return dt


def record(truth, seconds):
    if truth is not None:
        truth.write("%r\n" % seconds)
        truth.flush()
