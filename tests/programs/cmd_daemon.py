"""Starts a daemon the way one escapes its parent: fork, ``setsid``, fork again, and
exec ``env -i sleep 300`` (a clean environment: no ``DLTOP_RUN_TOKEN``), so the daemon
is in no session, group or environment of the run, and nobody's child but init's (or a
subreaper's). Its pid goes to ``PIDFILE`` (argv[1]); then ``STEPS`` (argv[2]) steps of
``dltop_report`` 0.25 s apart (2 when the file ``QUICK`` (argv[3]) exists), and exit 0."""

import os
import sys
import time

from dltop_report import report

pidfile, steps = sys.argv[1], int(sys.argv[2])
if len(sys.argv) > 3 and os.path.exists(sys.argv[3]):
    steps = 2
r, w = os.pipe()
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        os.closerange(3, 256)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execv("/usr/bin/env", ["env", "-i", "sleep", "300"])
    os._exit(0)
os.close(w)
os.waitpid(first, 0)  # the middle process is gone: the daemon is an orphan now
pid = os.read(r, 32).decode()
with open(pidfile, "w") as fh:
    fh.write(pid)
for _ in range(steps):
    time.sleep(0.25)
    report(0.25)
