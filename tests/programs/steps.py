"""A user program of ``STEPS`` steps of ``STEP_S`` seconds each, timed with dltop_report.

``python steps.py STEPS STEP_S [SAMPLES]``: the cheap real run for tests of the engine,
the queue and the viewers, where the framework is not under test (a PyTorch runner
spends ~5 s of CPU starting, per run; this, well under one). Each step sleeps; its
samples default to 8. With ``$STEPS_HOLD`` (a path) set and no file there, the 13th step
writes ``$STEPS_HOLD.held`` and waits (up to 120 s) for that file: a test holds a run
between two events (a runner whose engine died ends at its next event).
"""

import os
import sys
import time

from dltop_report import step

total, step_s = int(sys.argv[1]), float(sys.argv[2])
samples = int(sys.argv[3]) if len(sys.argv) > 3 else 8
hold = os.environ.get("STEPS_HOLD")
for i in range(total):
    with step(samples=samples):
        time.sleep(step_s)
        if hold and i == 12 and not os.path.exists(hold):
            open(hold + ".held", "w").close()
            end = time.time() + 120
            while not os.path.exists(hold) and time.time() < end:
                time.sleep(0.05)
