"""Run summaries cover the measured window only: exact figures from a scripted trace."""

from __future__ import annotations

import pytest

from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.runstats import NO_WINDOW, RunAccumulator
from dltop.telemetry.values import GpuSample, HostSample, TreeSample

from .traces import LinearTrace

S = 1_000_000_000  # ns per second
P0, SLOPE = 100.0, 10.0  # power = 100 W + 10 W/s * t: energy(t) = 100 t + 5 t^2


def energy(t: float) -> float:
    return P0 * t + SLOPE * t * t / 2


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def host(t_s: float, rss: int, cpu_pct: float) -> HostSample:
    tree = TreeSample(4242, 1, frozenset({4242}), 100.0, rss, 1)
    return HostSample(int(t_s * S), (cpu_pct,), None, 1, 2, 0, tree)


def feed(acc: RunAccumulator, events: dict[float, list[tuple[float, float, bool]]],
         until_s: float = 10.0) -> None:
    """Readings every 0.5 s from 0 to ``until_s`` (GPU: the trace; host: RSS = 1000 t);
    after the reading at time k, the iteration events ``events[k]`` arrive (late: each
    says its step ended earlier, as a child's event reaches the parent after the fact)."""
    clock = Clock()
    fake = FakeGpuBackend(1, LinearTrace(p0_w=P0, slope_w_per_s=SLOPE, util_pct=50.0),
                          clock_ns=clock)
    for step in range(int(until_s * 2) + 1):
        t = step / 2
        clock.ns = int(t * S)
        acc.add_gpu(fake.sample(0, slow=False))
        acc.add_host(host(t, int(1000 * t), cpu_pct=t))
        for end_s, seconds, warmup in events.get(t, []):
            acc.iteration(int(end_s * S), seconds, warmup)


# Warm-up ends at 2 s (told at 3 s); measured steps end at 4, 6 and 8 s (each told
# half a second late); readings go on until 10 s and are not the window's.
WARM_THEN_MEASURED = {3.0: [(1.0, 1.0, True), (2.0, 1.0, True)],
                      4.5: [(4.0, 2.0, False)], 6.5: [(6.0, 2.0, False)],
                      8.5: [(8.0, 2.0, False)]}
NO_WARMUP = {4.5: [(4.0, 2.0, False)], 6.5: [(6.0, 2.0, False)], 8.5: [(8.0, 2.0, False)]}


@pytest.mark.parametrize("events", [WARM_THEN_MEASURED, NO_WARMUP], ids=["warm-up", "none"])
def test_summary_covers_the_window_only(events: dict[float, list[tuple[float, float, bool]]],
                                        ) -> None:
    acc = RunAccumulator(1, 4242, (0,))
    feed(acc, events)
    t = acc.summary(samples=3 * 64)
    # The window is [2 s, 8 s]: readings at 2.0, 2.5, ..., 8.0 (13 of the 21).
    assert t.window_s == 6.0
    assert (t.gpu_samples, t.host_samples) == (13, 13)
    assert t.power_mean_w == pytest.approx(P0 + SLOPE * 5.0, abs=1e-9)  # mean of t = 5 s
    assert t.energy_source == "counter"
    assert t.energy_j == pytest.approx(energy(8) - energy(2), abs=1e-9)  # 900 J
    assert t.energy_j == pytest.approx(900.0)
    assert t.energy_bound_j == 0.0  # both edges fall on counter readings
    assert t.joules_per_sample == pytest.approx(900.0 / 192)
    assert t.energy_run_j == pytest.approx(energy(10) - energy(0), abs=1e-9)  # 1500 J
    assert t.rss_peak_bytes == 8000  # at 8 s, not the 10 000 of the last reading
    assert t.host_cpu_mean_pct == pytest.approx(5.0)
    assert t.tree_cpu_mean_pct == 100.0  # the scripted tree's
    assert t.gpu_util_mean_pct == 50.0 and t.telemetry_note is None


def test_energy_is_scaled_from_the_readings_span_to_the_window() -> None:
    # Window [2.25 s, 7.75 s]: readings 2.5 .. 7.5 span 5 s of its 5.5 s.
    acc = RunAccumulator(1, 4242, (0,))
    feed(acc, {3.0: [(2.25, 1.0, True)], 8.0: [(7.75, 5.5, False)]})
    t = acc.summary(samples=100)
    assert t.window_s == 5.5 and t.gpu_samples == 11
    # Interpolated at the edges (the trapezoid of a linear power is exact), within one
    # 0.5 s tick of power (under 200 W here) at each edge.
    assert t.energy_j == pytest.approx(energy(7.75) - energy(2.25), abs=1e-9)
    assert t.energy_bound_j is not None and 0 < t.energy_bound_j <= 2 * 0.5 * 200


def test_integrated_energy_over_the_window() -> None:
    acc = RunAccumulator(1, 4242, (0,))
    clock = Clock()
    fake = FakeGpuBackend(1, LinearTrace(p0_w=P0, slope_w_per_s=SLOPE), clock_ns=clock)
    for step in range(21):
        clock.ns = step * S // 2
        s = fake.sample(0, slow=False)
        acc.add_gpu(s.__class__(**{**s.__dict__, "energy_j": None}))  # no counter
        if step == 4:
            acc.iteration(2 * S, 1.0, warmup=True)
    acc.iteration(8 * S, 6.0, warmup=False)
    t = acc.summary(samples=10)
    # The trapezoid of a linear power is exact.
    assert (t.energy_source, t.energy_j) == ("integrated", pytest.approx(900.0, abs=1e-9))


def test_no_measured_iteration_gives_no_window_figures() -> None:
    acc = RunAccumulator(1, 4242, (0,))
    feed(acc, {3.0: [(2.0, 1.0, True)]})  # the run died after its warm-up
    t = acc.summary(samples=0)
    assert t.telemetry_note == NO_WINDOW and t.window_s is None
    assert (t.power_mean_w, t.energy_j, t.joules_per_sample, t.rss_peak_bytes,
            t.gpu_util_mean_pct, t.host_cpu_mean_pct, t.contaminated) == (None,) * 7
    assert t.gpu_samples == 0 and t.telemetry_simulated is True
    assert t.energy_run_j == pytest.approx(1500.0)  # the whole run's, named as such


def test_readings_told_late_and_out_of_order_land_in_the_window() -> None:
    # A reading taken before an iteration end that is already known is committed at once.
    acc = RunAccumulator(1, 4242, (0,))
    acc.iteration(1 * S, 1.0, warmup=True)
    acc.iteration(3 * S, 2.0, warmup=False)
    acc.add_host(host(2.0, 500, 10.0))  # inside [1 s, 3 s], arrives after both events
    acc.add_host(host(0.5, 900, 10.0))  # before the window: dropped
    acc.add_host(host(3.5, 700, 10.0))  # after the last measured end: never counted
    t = acc.summary(samples=1)
    assert (t.host_samples, t.rss_peak_bytes) == (1, 500)


def test_a_long_window_with_a_counter_read_once_a_second_is_exact_after_trimming() -> None:
    # 60 s at 10 Hz, the counter read every 10th tick (as nvml.ENERGY_EVERY_S does), an
    # iteration every 0.5 s: the accumulator trims the readings between the edges as it
    # goes, and the edges (2.05 s, 57.95 s: between counter readings) stay exact.
    from dltop.telemetry.values import GpuSample

    acc = RunAccumulator(1, 4242, (0,))
    for k in range(601):
        t = k / 10
        acc.add_gpu(GpuSample(round(t * S), 0, 50.0, None, None, None, P0 + SLOPE * t,
                              "instant", energy(t) if k % 10 == 0 else None))
        if k == 21:
            acc.iteration(round(2.05 * S), 1.0, warmup=True)
        if k > 21 and k % 5 == 0 and t <= 58.0:
            acc.iteration(round(min(t - 0.05, 57.95) * S), 0.5, warmup=False)
    t = acc.summary(samples=100)
    assert t.window_s == pytest.approx(55.9)
    assert t.energy_source == "counter"
    assert t.energy_j == pytest.approx(energy(57.95) - energy(2.05), abs=1e-6)
    assert t.energy_bound_j is not None and t.energy_bound_j <= 2 * 0.1 * (P0 + SLOPE * 60)


def test_idle_power_is_the_mean_of_the_readings_inside_the_wait_before_the_load() -> None:
    """The wait 0.5-2.5 s (told at 2.5 s: the readings before it wait in the pending
    list; the one at 2.5 s arrives after); two GPUs at 100 + 10 t and 200 W."""
    acc = RunAccumulator(1, 4242, (0, 1))
    for step in range(21):  # readings every 0.25 s from 0 to 5 s
        t = step / 4
        if t == 2.5:
            acc.idle(int(0.5 * S), int(2.5 * S))
        acc.add_gpu(GpuSample(int(t * S), 0, 50.0, None, None, None, P0 + SLOPE * t,
                              "instant", None))
        acc.add_gpu(GpuSample(int(t * S), 1, 50.0, None, None, None, 200.0, "instant", None))
        if t == 4.0:
            acc.iteration(int(4.0 * S), 1.0, warmup=False)  # the load: 3-4 s
    got = acc.summary(samples=10)
    inside = [P0 + SLOPE * k / 4 for k in range(2, 11)]  # 0.5, 0.75 ... 2.5 s
    assert got.idle_readings == len(inside) == 9
    assert got.idle_window_s == pytest.approx(2.0)
    assert got.idle_power_w == pytest.approx(sum(inside) / len(inside) + 200.0)
    assert got.power_mean_w == pytest.approx((P0 + SLOPE * 3.5) + 200.0)  # the load's


def test_no_idle_wait_gives_no_idle_figures_and_a_gpu_without_readings_no_power() -> None:
    acc = RunAccumulator(1, 4242, (0,))
    acc.add_gpu(GpuSample(int(1 * S), 0, 50.0, None, None, None, 90.0, "instant", None))
    acc.iteration(int(2 * S), 1.0, warmup=False)
    got = acc.summary(samples=1)
    assert (got.idle_power_w, got.idle_window_s, got.idle_readings) == (None, None, None)
    acc = RunAccumulator(1, 4242, (0, 1))
    acc.idle(0, int(2 * S))  # GPU 1 gives no reading
    acc.add_gpu(GpuSample(int(1 * S), 0, 50.0, None, None, None, 90.0, "instant", None))
    acc.iteration(int(3 * S), 1.0, warmup=False)
    got = acc.summary(samples=1)
    assert (got.idle_power_w, got.idle_readings) == (None, 0)
