"""A launcher like torchrun: starts ``WORKERS`` worker processes with inherited
descriptors closed (subprocess's default) and ``$RANK`` set, each running ``STEPS``
steps through dltop_report; ``cmd_launcher.py WORKERS STEPS FILE``. Each worker first
puts a file of its own (FILE.<rank>) under the number ``$DLTOP_EVENT_FD`` names, as a
worker's open files or sockets can be: dltop_report must not write into it.
"""

import os
import subprocess
import sys

WORKER = """
import os, sys, time
f = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.dup2(f, int(os.environ["DLTOP_EVENT_FD"]))
from dltop_report import step
for i in range(int(sys.argv[2])):
    with step(samples=16) as s:
        time.sleep(0.01)
        s.loss = 1.0
"""

workers, steps, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
procs = [subprocess.Popen([sys.executable, "-c", WORKER, "%s.%d" % (path, rank), steps],
                          env=dict(os.environ, RANK=str(rank), WORLD_SIZE=str(workers)))
         for rank in range(workers)]
sys.exit(max(p.wait() for p in procs))
