"""Prints ``step N`` lines (no time) in bursts: ``STEPS TRUTH PER_WRITE``.

Like a program whose output is block-buffered, or one that prints its log at the
end: each write holds PER_WRITE steps' lines (0: all of them, after the last step).
"""

import sys

from cmd_common import step, steps_and_truth

steps, truth = steps_and_truth()
per_write = int(sys.argv[3])
lines = []
for i in range(steps):
    step(i, truth)
    lines.append("step %d\n" % i)
    if per_write and len(lines) == per_write:
        sys.stdout.write("".join(lines))
        sys.stdout.flush()
        lines = []
sys.stdout.write("".join(lines))
