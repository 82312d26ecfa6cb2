"""A tqdm-style progress bar redrawn with ``\\r``, the rate of the last step in it/s."""

import sys

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
for i in indices(steps):
    dt = step(i, truth)
    done = i + 1
    sys.stdout.write("\r%3d%%|%-10s| %d/%d [00:01<00:02, %.3fit/s]" % (
        100 * done // steps, "#" * (10 * done // steps), done, steps, 1.0 / dt))
    sys.stdout.flush()
sys.stdout.write("\n")
