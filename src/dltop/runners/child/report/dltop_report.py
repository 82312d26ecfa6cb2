"""Report training iterations to dltop from your own script (any Python >= 3.6).

    from dltop_report import step

    for batch in loader:
        with step(samples=len(batch)) as s:
            loss = train_step(batch)
            s.loss = float(loss)   # optional

Run by dltop (``framework = "command"``), each ``step`` sends one iteration
event; run by hand (no ``$DLTOP_EVENT_FD``) it does nothing. Time what you
want measured inside the block, synchronised with your device.
"""

import json
import os
import time

_FD = os.environ.get("DLTOP_EVENT_FD")
_state = {"index": 0}


def report(seconds, samples=None, loss=None):
    """Report one iteration that took ``seconds`` and ended now."""
    if not _FD:
        return
    event = {"v": 1, "event": "iter", "index": _state["index"], "seconds": float(seconds),
             "samples": samples, "loss": None if loss is None else float(loss),
             "t_mono_ns": int(time.monotonic() * 1e9)}
    _state["index"] += 1
    os.write(int(_FD), (json.dumps(event) + "\n").encode("utf-8"))


class step(object):  # noqa: N801 - reads as a verb at the call site
    """Context manager timing one iteration; set ``.loss`` inside to report it."""

    def __init__(self, samples=None):
        self.samples = samples
        self.loss = None
        self._t0 = None

    def __enter__(self):
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            report(time.perf_counter() - self._t0, self.samples, self.loss)
        return False
