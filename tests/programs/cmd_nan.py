"""Prints a loss that turns NaN at step 3: ``step 3 took 0.02s loss nan``."""

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
for i in indices(steps):
    dt = step(i, truth)
    print("step %d took %.6fs loss %s" % (i, dt, "nan" if i >= 3 else "%.3f" % (1.0 / (i + 1))),
          flush=True)
