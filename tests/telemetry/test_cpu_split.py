"""Host CPU user/system/iowait split: the counter arithmetic, a real reading, and the
run summary over its measured window (exact figures from a scripted trace)."""

from __future__ import annotations

import sys
import time
from collections import namedtuple

import pytest

from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.host import HostSampler, cpu_split_pct
from dltop.telemetry.runstats import NO_WINDOW, RunAccumulator
from dltop.telemetry.sampler import Sampler
from dltop.telemetry.values import HostSample, TreeSample
from dltop.telemetry.windows import Batch

S = 1_000_000_000  # ns per second
LinuxTimes = namedtuple("LinuxTimes", "user nice system idle iowait irq softirq steal guest "
                                      "guest_nice")
MacTimes = namedtuple("MacTimes", "user nice system idle")


def test_split_is_each_share_of_all_cpu_time_between_two_readings() -> None:
    prev = LinuxTimes(100, 10, 50, 800, 20, 5, 5, 0, 30, 0)
    # +60 user, +20 system, +100 idle, +10 iowait, +5 irq, +5 softirq: 200 s in all;
    # +40 guest is already inside user, so it is not counted twice.
    now = LinuxTimes(160, 10, 70, 900, 30, 10, 10, 0, 70, 0)
    assert cpu_split_pct(prev, now) == (30.0, 15.0, 5.0)  # user, system + irq + softirq, iowait


def test_split_without_iowait_field_says_none_and_no_time_says_nothing() -> None:
    assert cpu_split_pct(MacTimes(1, 1, 1, 1), MacTimes(4, 2, 3, 15)) == (20.0, 10.0, None)
    same = LinuxTimes(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    assert cpu_split_pct(same, same) is None


def test_real_reading_is_primed_and_sums_sensibly() -> None:
    sampler = HostSampler()  # primes its counters: the first sample is not all zeros
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:  # this process keeps one CPU busy in user mode
        sum(range(1000))
    h = sampler.sample()
    assert h.cpu_user_pct is not None and h.cpu_system_pct is not None
    assert h.cpu_user_pct > 0.0
    parts = h.cpu_user_pct + h.cpu_system_pct + (h.cpu_iowait_pct or 0.0)
    assert 0.0 < parts <= 100.0 + 1e-6
    if sys.platform.startswith("linux"):
        assert h.cpu_iowait_pct is not None and 0.0 <= h.cpu_iowait_pct <= 100.0
    # psutil.cpu_percent, primed at the same moment, measured the same interval: its busy
    # share is user + system (+ steal, which a VM may add): the two agree
    mean_busy = sum(h.cpu_pct_per_core) / len(h.cpu_pct_per_core)
    assert abs(h.cpu_user_pct + h.cpu_system_pct - mean_busy) < 15.0


def host(t_s: float, user: float, system: float, iowait: float | None) -> HostSample:
    tree = TreeSample(4242, 1, frozenset({4242}), 100.0, 1000, 1)
    return HostSample(int(t_s * S), (50.0,), None, 1, 2, 0, tree, cpu_user_pct=user,
                      cpu_system_pct=system, cpu_iowait_pct=iowait)


def test_run_summary_covers_the_measured_window_only() -> None:
    acc = RunAccumulator(1, 4242, ())
    # Readings every 0.5 s from 0 to 12 s: user = t, system = 2 before 2 s and after
    # 8 s else 10, iowait = 1 except None (not read) at 5 s. Warm-up ends at 2 s (told
    # at 3 s), the measured steps at 4, 6 and 8 s (told half a second late).
    events = {3.0: [(1.0, 1.0, True), (2.0, 1.0, True)], 4.5: [(4.0, 2.0, False)],
              6.5: [(6.0, 2.0, False)], 8.5: [(8.0, 2.0, False)]}
    for step in range(25):
        t = step / 2
        acc.add_host(host(t, user=t, system=10.0 if 2.0 <= t <= 8.0 else 2.0,
                          iowait=None if t == 5.0 else 1.0))
        for end_s, seconds, warmup in events.get(t, []):
            acc.iteration(int(end_s * S), seconds, warmup)
    s = acc.summary(samples=3)
    # The window [2 s, 8 s] holds the 13 readings 2.0, 2.5, ..., 8.0: mean user 5.0
    # (the whole run's would be 6.0), system 10.0 (outside: 2.0), iowait over the 12 read.
    assert s.host_samples == 13
    assert s.host_cpu_user_pct == pytest.approx(5.0)
    assert s.host_cpu_system_pct == pytest.approx(10.0)
    assert s.host_cpu_iowait_pct == pytest.approx(1.0)


def test_no_window_no_split_and_no_readings_none() -> None:
    acc = RunAccumulator(1, 4242, ())
    acc.add_host(host(0.5, 50.0, 5.0, 1.0))
    acc.iteration(1 * S, 1.0, warmup=True)  # died after its warm-up
    s = acc.summary(samples=0)
    assert s.telemetry_note == NO_WINDOW
    assert (s.host_cpu_user_pct, s.host_cpu_system_pct, s.host_cpu_iowait_pct) == (None,) * 3
    acc = RunAccumulator(2, 4242, ())
    acc.add_host(host(1.5, 50.0, 5.0, None))  # off Linux: no iowait field
    acc.iteration(1 * S, 1.0, warmup=True)
    acc.iteration(2 * S, 1.0, warmup=False)
    s = acc.summary(samples=1)
    assert (s.host_cpu_user_pct, s.host_cpu_system_pct, s.host_cpu_iowait_pct) == (
        50.0, 5.0, None)


def test_sampler_host_rows_carry_the_split() -> None:
    batches: list[Batch] = []
    sampler = Sampler(FakeGpuBackend(1), batches.append, gpu_hz=10, host_hz=10,
                      window_s=0.0, flush_s=0.0)
    sampler.tick()
    time.sleep(0.05)
    sampler.tick()
    sampler.stop()
    rows = [w for b in batches for w in b.host]
    assert rows and any(w.cpu_user_pct is not None for w in rows)
    for w in rows:
        if w.cpu_user_pct is not None:
            assert w.cpu_system_pct is not None
            assert 0.0 <= w.cpu_user_pct + w.cpu_system_pct <= 100.0 + 1e-6
