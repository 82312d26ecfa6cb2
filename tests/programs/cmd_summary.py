"""Prints nothing per step, one summary line at the end: ``trained 20 steps in 0.6012 s``."""

import time

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
t0 = time.perf_counter()
for i in indices(steps):
    step(i, truth)
print("trained %d steps in %.6f s" % (steps, time.perf_counter() - t0), flush=True)
