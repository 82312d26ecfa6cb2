"""A user program of ``STEPS`` steps of ``STEP_S`` seconds each, timed with dltop_report.

``python steps.py STEPS STEP_S [SAMPLES]``: the cheap real run for tests of the engine,
the queue and the viewers, where the framework is not under test (a PyTorch runner
spends ~5 s of CPU starting, per run; this, well under one). Each step sleeps; its
samples default to 8.
"""

import sys
import time

from dltop_report import step

total, step_s = int(sys.argv[1]), float(sys.argv[2])
samples = int(sys.argv[3]) if len(sys.argv) > 3 else 8
for _ in range(total):
    with step(samples=samples):
        time.sleep(step_s)
