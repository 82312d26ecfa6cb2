"""Monotonic to wall-clock time: one anchor pair, taken once per process.

Iteration events carry the child's ``time.monotonic`` (``CLOCK_MONOTONIC``,
system-wide on Linux, so the parent can compare it with its own readings) and
telemetry readings carry the sampler's ``time.monotonic_ns``. Wall-clock
seconds are derived from them through one (monotonic, wall) pair read back to
back, so that stored rows line up with ``runs.started_at`` without each reading
paying for a second clock, and a wall-clock step (NTP) in the middle of a run
does not tear its timeline apart. The derived time drifts from the system's
wall clock only by the NTP slew since the anchor (parts per million).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class WallAnchor:
    """A (monotonic ns, epoch seconds) pair read at the same moment."""

    mono_ns: int
    wall_s: float

    @classmethod
    def now(cls) -> WallAnchor:
        """Read both clocks now."""
        return cls(time.monotonic_ns(), time.time())

    def wall(self, mono_ns: int) -> float:
        """Epoch seconds (UTC) of the monotonic instant ``mono_ns``."""
        return self.wall_s + (mono_ns - self.mono_ns) / 1e9


_ANCHOR = WallAnchor.now()


def anchor() -> WallAnchor:
    """This process's anchor (read once, at import)."""
    return _ANCHOR
