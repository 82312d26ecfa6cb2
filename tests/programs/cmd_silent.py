"""Prints ``step N`` after each step and no time at all (for timing = "line-gap"). Its
truth file holds the time between successive prints (the first print starts the clock)."""

import time

from cmd_common import indices, record, step, steps_and_truth

steps, truth = steps_and_truth()
last = None
for i in indices(steps):
    step(i)
    now = time.perf_counter()
    if last is not None:  # before the print: dltop may stop the program once it has it
        record(truth, now - last)
    last = now
    print("step %d" % i, flush=True)
