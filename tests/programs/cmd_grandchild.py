"""Leaves a grandchild behind: a new session (setsid) that keeps the inherited stdout
open and sleeps, its pid written to ``PIDFILE`` (argv[3]); then steps and exits 0."""

import subprocess
import sys

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"],
                         start_new_session=True)
with open(sys.argv[3], "w") as fh:
    fh.write(str(child.pid))
for i in indices(steps):
    print("step %d took %.6fs" % (i, step(i, truth)), flush=True)
