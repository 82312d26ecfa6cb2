"""Runs two steps, prints a traceback-like error with a terminal escape in it, exits 1."""

import sys

from cmd_common import step

for i in range(2):
    print("step %d took %.6fs" % (i, step(i)), flush=True)
for k in range(30):
    print("log line %d" % k)
print("RuntimeError: \x1b[31mCUDA error: device-side assert triggered\x1b[0m", flush=True)
sys.exit(1)
