"""A fake GPU trace for the tests (:class:`dltop.telemetry.fake.Trace`): linear power,
so that energy tests have exact answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearTrace:
    """power = p0_w + slope_w_per_s * t; utilization fixed. Energy is exact."""

    p0_w: float = 100.0
    slope_w_per_s: float = 0.0
    util_pct: float = 50.0

    def util(self, t: float, index: int) -> float:
        return self.util_pct

    def power_w(self, t: float, index: int) -> float:
        return self.p0_w + self.slope_w_per_s * t

    def energy_j(self, t: float, index: int) -> float:
        return self.p0_w * t + self.slope_w_per_s * t * t / 2.0
