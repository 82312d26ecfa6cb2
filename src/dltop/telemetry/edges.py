"""A cumulative energy counter at any instant: interpolated at a window's edges, with a bound.

An energy counter (NVML's, RAPL's) is read at most once a second, so a measured
window's start and end fall between two readings. Taking the nearest readings'
difference, or scaling the readings' span to the window, guesses the energy of
up to a second at each end. Here the counter at an edge ``t`` is interpolated
between the readings around it, ``(t0, E0)`` and ``(t1, E1)``, shaped by the
power readings in between (10 Hz on a GPU): the share of ``E1 - E0`` used before
``t`` is the share of the power's trapezoid integral over ``[t0, t]``. Without power
readings the interpolation is linear in time.

The error bound of one edge is one tick of power: the larger of the two power
readings around ``t`` times their spacing (scaled as the counter's delta is),
never more than the counter's own step ``max(f, 1 - f) * (E1 - E0)`` that
monotony guarantees. An edge with no counter reading on one side (the run ended
before the next one) is the nearest reading plus or minus the power integral to
``t``, its bound that tick of power plus the power times any gap past the last
power reading. A window's bound is the sum of its two edges'.

Pure functions over ``(t_ns, power_w, counter_j)`` tuples: tested with known counters.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

Reading = tuple[int, float | None, float | None]
"""(monotonic ns, power in W or None, cumulative counter in J or None)."""
Point = tuple[int, float]


def power_integral(powers: Sequence[Point], a_ns: int, b_ns: int) -> float:
    """Trapezoid integral (J) of piecewise-linear power over ``[a, b]`` (``a <= b``).

    Power is held at the first or last reading outside the readings' span.
    """
    if not powers or b_ns <= a_ns:
        return 0.0
    times = [p[0] for p in powers]

    def p_at(t: int) -> float:
        i = bisect_right(times, t)
        if i == 0:
            return powers[0][1]
        if i == len(powers):
            return powers[-1][1]
        (ta, pa), (tb, pb) = powers[i - 1], powers[i]
        return pa + (pb - pa) * (t - ta) / (tb - ta) if tb > ta else pb

    knots = [a_ns, *times[bisect_right(times, a_ns):bisect_left(times, b_ns)], b_ns]
    total = 0.0
    prev_t, prev_p = knots[0], p_at(knots[0])
    for t in knots[1:]:
        p = p_at(t)
        total += (prev_p + p) / 2.0 * (t - prev_t) / 1e9
        prev_t, prev_p = t, p
    return total


def _tick(powers: Sequence[Point], t_ns: int) -> float | None:
    """Energy (J) of one power tick around ``t``: larger neighbour power times spacing."""
    if not powers:
        return None
    times = [p[0] for p in powers]
    i = bisect_left(times, t_ns)
    before = powers[i - 1] if i > 0 else None
    after = powers[i] if i < len(powers) else None
    if before is not None and after is not None:
        return max(before[1], after[1]) * (after[0] - before[0]) / 1e9
    near = before or after
    assert near is not None
    spacing = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0
    return near[1] * (abs(t_ns - near[0]) + spacing) / 1e9


def counter_at(readings: Sequence[Reading], t_ns: int) -> tuple[float, float] | None:
    """The counter (J) at ``t_ns`` and its error bound (J), or None when it cannot be told.

    Args:
        readings: one device's readings in time order; the counter must not
            decrease (a wrap is undone before, by the counter's owner).
        t_ns: the instant (monotonic ns).
    """
    counters = [(t, e) for t, _, e in readings if e is not None]
    powers = [(t, p) for t, p, _ in readings if p is not None]
    if not counters:
        return None
    times = [c[0] for c in counters]
    i = bisect_right(times, t_ns)
    c0 = counters[i - 1] if i > 0 else None
    if c0 is not None and c0[0] == t_ns:
        return c0[1], 0.0
    c1 = counters[i] if i < len(counters) else None
    tick = _tick(powers, t_ns)
    if c0 is not None and c1 is not None:
        (t0, e0), (t1, e1) = c0, c1
        f = (t_ns - t0) / (t1 - t0)
        whole = power_integral(powers, t0, t1)
        step_bound = max(f, 1.0 - f) * (e1 - e0)
        if whole <= 0 or tick is None:
            return e0 + (e1 - e0) * f, step_bound
        scale = (e1 - e0) / whole
        value = e0 + scale * power_integral(powers, t0, t_ns)
        return value, min(step_bound, scale * tick)
    if tick is None:
        return None
    if c0 is not None:
        return c0[1] + power_integral(powers, c0[0], t_ns), tick
    assert c1 is not None
    return c1[1] - power_integral(powers, t_ns, c1[0]), tick


def window_energy(readings: Sequence[Reading], start_ns: int,
                  end_ns: int) -> tuple[float, float] | None:
    """Energy (J) over ``[start, end]`` from one device's counter, and its error bound (J)."""
    a = counter_at(readings, start_ns)
    b = counter_at(readings, end_ns)
    if a is None or b is None:
        return None
    return max(0.0, b[0] - a[0]), a[1] + b[1]


EDGE_SLACK = 64
"""Readings of a counter (a GPU's, a RAPL domain's) kept for a window's edges before
:func:`keep_for_edges` trims them."""


def keep_for_edges(readings: list[Reading], start_ns: int | None,
                   end_ns: int | None) -> list[Reading]:
    """The readings :func:`window_energy` still needs once the window may grow only at its end.

    Kept: from the last counter reading at or before ``start`` to the first at or
    after it, and from the last counter reading at or before ``end`` onward
    (``end`` only moves later). Without a start yet: from the last counter reading
    at or before ``end`` (the warm-up's end, which the start cannot precede).
    """
    counter_idx = [i for i, r in enumerate(readings) if r[2] is not None]
    if end_ns is None or not counter_idx:
        return readings

    def last_at_or_before(t: int) -> int:
        found = [i for i in counter_idx if readings[i][0] <= t]
        return found[-1] if found else 0

    tail = last_at_or_before(end_ns)
    if start_ns is None:
        return readings[tail:]
    head = last_at_or_before(start_ns)
    after = [i for i in counter_idx if readings[i][0] >= start_ns]
    head_end = after[0] + 1 if after else len(readings)
    if head_end >= tail:
        return readings[head:]
    return readings[head:head_end] + readings[tail:]
