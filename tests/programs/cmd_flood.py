"""Floods its output (``MIB`` MiB of lines, argv[3]) between its steps, then ends with
``the end``."""

import sys

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
junk = ("x" * 1023 + "\n").encode()
for i in indices(steps):
    print("step %d took %.6fs" % (i, step(i, truth)), flush=True)
    for _ in range(int(float(sys.argv[3]) * 1024) // max(steps, 1)):
        sys.stdout.buffer.write(junk)
    sys.stdout.flush()
print("the end", flush=True)
