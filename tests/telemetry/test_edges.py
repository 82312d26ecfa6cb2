"""The energy counter interpolated at a window's edges, with its bound: known counters."""

from __future__ import annotations

import pytest

from dltop.telemetry.edges import (
    Reading,
    counter_at,
    keep_for_edges,
    power_integral,
    window_energy,
)

S = 1_000_000_000


def step_power(t_s: float) -> float:
    """100 W until 5 s, 300 W from then on."""
    return 100.0 if t_s < 5.0 else 300.0


def true_energy(t_s: float) -> float:
    return 100.0 * min(t_s, 5.0) + 300.0 * max(0.0, t_s - 5.0)


def readings(until_s: float = 12.0, counter_every: int = 10) -> list[Reading]:
    """Power every 0.1 s; the counter (exact, offset by 5000 J) every ``counter_every`` ticks."""
    out: list[Reading] = []
    for k in range(int(until_s * 10) + 1):
        t = k / 10
        e = 5000.0 + true_energy(t) if k % counter_every == 0 else None
        out.append((round(t * S), step_power(t), e))
    return out


def test_a_counter_reading_at_the_instant_is_exact() -> None:
    assert counter_at(readings(), 3 * S) == (5300.0, 0.0)


def test_power_integral_is_the_trapezoid() -> None:
    ps = [(0, 100.0), (S, 200.0)]
    assert power_integral(ps, 0, S) == pytest.approx(150.0)
    assert power_integral(ps, S // 2, 2 * S) == pytest.approx(87.5 + 200.0)  # held after


def test_edges_between_counter_readings_are_within_one_power_tick() -> None:
    start, end = int(4.55 * S), int(8.35 * S)
    got = window_energy(readings(), start, end)
    assert got is not None
    energy, bound = got
    truth = true_energy(8.35) - true_energy(4.55)  # 1050 J
    assert abs(energy - truth) <= bound
    # One 0.1 s tick of power at each edge (at most 300 W x 0.1 s each), not the
    # counter's 1 s step that the nearest-readings difference would risk.
    assert bound <= 2 * 30.0 + 1e-9
    assert abs(energy - truth) <= 5.0 + 1e-9  # the trapezoid smears the step over 0.1 s
    # The old way, the counter's delta over the readings inside (5 s .. 8 s) scaled to
    # the window, is off by far more than that bound here.
    scaled = (true_energy(8.0) - true_energy(5.0)) * 3.8 / 3.0
    assert abs(scaled - truth) > 2 * bound


def test_without_power_readings_the_interpolation_is_linear_with_the_counters_bound() -> None:
    bare = [(t, None, e) for t, _, e in readings() if e is not None]
    value, bound = counter_at(bare, int(2.25 * S)) or (None, None)
    assert value == pytest.approx(5225.0)
    assert bound == pytest.approx(0.75 * 100.0)  # max(f, 1 - f) of the counter's 100 J step


def test_an_end_past_the_last_counter_reading_adds_the_power_integral() -> None:
    rs = [r for r in readings() if r[0] <= int(9.6 * S)]  # counter last read at 9 s
    value, bound = counter_at(rs, int(9.55 * S)) or (None, None)
    assert value == pytest.approx(5000.0 + true_energy(9.55))
    assert 0 < bound <= 300.0 * 0.1 + 1e-9


def test_no_counter_no_figure() -> None:
    assert counter_at([(t, p, None) for t, p, _ in readings()], 3 * S) is None
    assert window_energy([], 0, S) is None


def test_trimming_keeps_what_the_edges_need() -> None:
    rs = readings()
    start, end = int(2.35 * S), int(10.45 * S)
    kept = keep_for_edges(rs, start, end)
    assert len(kept) < len(rs) // 2
    assert window_energy(kept, start, end) == window_energy(rs, start, end)
    # Later readings appended after trimming still give the same end edge.
    assert window_energy(keep_for_edges(rs, None, start), start, end) == \
        window_energy(rs, start, end)
