"""The readings rule (:mod:`dltop.telemetry.readings`) over a configuration's runs.

A telemetry figure of a configuration stands on all its ok runs: when one of them has
too few readings or too short a window, the figure is ``n/a`` with that run's window
and count, rather than a mean that hides it among longer runs.
"""

from __future__ import annotations

from dltop.results.aggregate import ConfigResult
from dltop.telemetry.readings import gpu_shortfall, host_shortfall

Detail = tuple[tuple[str, float | None], ...]


def readings_check(res: ConfigResult, gpu: bool) -> tuple[str, Detail]:
    """Whether the configuration's runs stand on enough readings for a telemetry figure.

    Returns:
        The shortfall of its weakest run (``n/a: window 0.04 s, 0 readings (set
        min_time_s)``; empty when every run has enough: :mod:`dltop.telemetry.readings`)
        and the cell's detail: the fewest ``readings`` and the shortest ``window_s`` over
        its runs (None where no run recorded them).
    """
    count = "gpu_readings" if gpu else "host_readings"
    judge = gpu_shortfall if gpu else host_shortfall
    windows = [float(w) for w in (r.get("window_s") for r in res.runs) if w is not None]
    counts = [int(n) for n in (r.get(count) for r in res.runs) if n is not None]
    worst = ""
    for r in sorted(res.runs, key=lambda r: (r.get(count) is None, r.get(count) or 0,
                                             r.get("window_s") or 0.0)):
        why = judge(r.get("window_s"), r.get(count))
        if why is not None:
            worst = why
            break
    return worst, (("readings", min(counts) if counts else None),
                   ("window_s", min(windows) if windows else None))
