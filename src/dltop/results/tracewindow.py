"""The part of a run's time axis a chart shows: from its first iteration, not its start.

A run's trace starts when its runner process does (:mod:`dltop.results.runtrace`):
importing the framework, building the model and moving it to the device take seconds
(25 s of a 35 s H200 run), and the first warm-up step can take fifty times a measured
one (cuDNN autotuning: 2.66 s against 55 ms). Drawn as they are, the measured window
is squeezed into the last tenth of the x axis and its steps lie flat on the floor of
the y axis. :func:`window` says what the report's run figures and the TUI's run
charts both draw instead: x from a little before the first iteration (that little
drawn as a band that says how long start-up took), y of s/iter up to the slowest
measured step (slower warm-up steps drawn clipped at the top and marked).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BAND = 0.06
"""Width of the start-up band, as a share of the iterations' span."""
HEADROOM = 1.15
"""Top of the s/iter axis over the slowest measured step."""


@dataclass(frozen=True)
class TimeWindow:
    """The x and y ranges of a run's charts, in seconds since the run started."""

    x_start_s: float
    """Left edge: the start-up band's start."""
    first_s: float
    """Start of the first iteration: start-up is everything before it."""
    x_end_s: float
    y_cap_s: float | None
    """Top of the s/iter axis (None: nothing above the measured steps, no clipping)."""
    clipped: int
    """Iterations above :attr:`y_cap_s`, drawn at it."""
    slowest_s: float
    """The slowest iteration of all, warm-up included."""

    @property
    def startup_s(self) -> float:
        """Seconds from the run's start to its first iteration."""
        return self.first_s


def window(iterations: Iterable[tuple[float, float, bool]], end_s: float | None = None
           ) -> TimeWindow | None:
    """The window of ``(t_end_s, seconds, warmup)`` iterations (None: none is timed).

    Args:
        iterations: each iteration's end (seconds since the run's start), its length,
            and whether it was a warm-up step.
        end_s: the trace's end (its last telemetry reading), when later than the last
            iteration's.
    """
    its = list(iterations)
    if not its:
        return None
    first = max(0.0, min(t - s for t, s, _ in its))
    last = max(t for t, _, _ in its)
    end = max(last, end_s or 0.0)
    band = (last - first) * BAND
    slowest = max(s for _, s, _ in its)
    measured = [s for _, s, warm in its if not warm]
    cap = max(measured) * HEADROOM if measured else None
    if cap is not None and slowest <= cap:
        cap = None  # nothing to clip: the axis fits every step as it is
    clipped = 0 if cap is None else sum(1 for _, s, _ in its if s > cap)
    return TimeWindow(max(0.0, first - band), first, end, cap, clipped, slowest)
