"""Per-operator profile of a few extra CNTK steps (profile key ``profile = true``).

Valid Python 3.6; imported by cntk_runner.py after CNTK is importable.

CNTK 2.7's ``start_profiler`` only times whole phases (forward + backward,
weight update, data reading), so it cannot say which operator took the time.
Its *node timing* can: ``debugging.set_node_timing(True)`` makes the
computation network time every node's forward and backward pass, and
``Function/Trainer.print_node_timing()`` prints, from C++ to file descriptor 2,
one line per node::

    Convolution209   forward avg 0.004888s, backward avg 0.008342s (fwd# 5|bwd# 5)

This module captures that text and groups the nodes by operator type (the node
name without its number), forward and backward apart. CNTK's nodes are flat
(block functions are inlined), so an operator's total time is its self time.
Averages come with microsecond resolution; the weight update is no node and
shows only in the step's wall time (``step_ms``).
"""

import os
import re
import tempfile
import time

import cntk as C

PROFILE_STEPS = 5
_LINE = re.compile(r"^(\S+)\s+forward avg ([0-9.eE+-]+)s, backward avg ([0-9.eE+-]+)s "
                   r"\(fwd# (\d+)\|bwd# (\d+)\)")


def _captured_fd2(call):
    """Run ``call()`` with file descriptor 2 sent to a file; the text written there."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as fh:
        try:
            os.dup2(fh.fileno(), 2)
            call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        fh.seek(0)
        return fh.read().decode("utf-8", "replace")


def parse_node_timing(text):
    """Operators from ``print_node_timing`` text: dicts of the ``profile`` event's ``ops``."""
    groups = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        kind = re.sub(r"\d+$", "", m.group(1)) or m.group(1)
        for phase, avg, count in (("forward", m.group(2), m.group(4)),
                                  ("backward", m.group(3), m.group(5))):
            if not int(count):
                continue
            op = groups.setdefault("%s (%s)" % (kind, phase), [0, 0.0])
            op[0] += int(count)
            op[1] += float(avg) * int(count) * 1000.0
    return [{"name": name, "calls": calls, "self_cpu_ms": ms, "self_device_ms": None,
             "total_ms": ms, "shapes": None} for name, (calls, ms) in groups.items()]


def profile(reporter, device, timed, step, steps=PROFILE_STEPS):
    """Run ``steps`` more calls of ``step()`` under node timing; send the ``profile`` event.

    ``timed`` is the object whose ``print_node_timing`` reports (the Trainer, or
    the model for inference). Sends nothing when CNTK reports no node.
    """
    # On for the rest of the process: CNTK 2.7's Python binding has no
    # disable_node_timing (debugging.set_node_timing(False) raises), and
    # nothing is timed after the profile.
    C.debugging.set_node_timing(True)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    step_ms = (time.perf_counter() - t0) * 1000.0 / steps
    text = _captured_fd2(timed.print_node_timing)
    ops = parse_node_timing(text)
    if ops:
        reporter.profile(steps, step_ms, "cpu" if device == "cpu" else "cuda", ops)
    return ops
