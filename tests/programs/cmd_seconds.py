"""Prints each step's seconds: ``step 3 took 0.030512s loss 0.2500``."""

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
for i in indices(steps):
    dt = step(i, truth)
    print("step %d took %.6fs loss %.4f" % (i, dt, 1.0 / (i + 1)), flush=True)
