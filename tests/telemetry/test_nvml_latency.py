"""nvml_latency.query_latencies: every query the sampler makes, timed (against a fake pynvml)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from tests.telemetry.test_nvml import fake_pynvml

from dltop.telemetry import nvml
from dltop.telemetry.nvml_latency import query_latencies


def test_every_sampler_query_and_both_ticks_are_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(instant=True))
    # Every tick due for the counter and process utilization: each query timed each time.
    monkeypatch.setattr(nvml, "ENERGY_EVERY_S", 0.0)
    monkeypatch.setattr(nvml, "PROC_UTIL_BACKOFF_S", 0.0)
    nvml.reset_for_tests()
    try:
        rows = {r.field: r for r in query_latencies(1, calls=50, budget_s=60.0)}
    finally:
        nvml.reset_for_tests()
    assert set(rows) == {"utilization", "memory", "field_values", "temperature", "sm_clock",
                         "mem_clock", "throttle_reasons", "processes", "process_utilization",
                         "tick fast", "tick slow"}
    assert rows["utilization"].calls == 100  # fast fields: both ticks
    assert rows["sm_clock"].calls == rows["tick slow"].calls == rows["tick fast"].calls == 50
    # The fake answers "not supported" for these: every call counted as failed.
    assert rows["temperature"].failures == 50 and rows["process_utilization"].failures == 50
    assert rows["utilization"].failures == 0
    for r in rows.values():
        assert 0 < r.median_us <= r.p99_us <= r.max_us


def test_budget_stops_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(instant=True))
    nvml.reset_for_tests()
    try:
        rows = {r.field: r for r in query_latencies(0, calls=10_000, budget_s=0.0)}
    finally:
        nvml.reset_for_tests()
    assert rows["tick slow"].calls == 1


def test_no_nvml_or_no_such_gpu_gives_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    broken: Any = fake_pynvml(instant=True)

    def fail() -> None:
        raise RuntimeError("driver not loaded")

    broken.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    nvml.reset_for_tests()
    try:
        assert query_latencies() == ()
    finally:
        nvml.reset_for_tests()
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(instant=True))
    try:
        assert query_latencies(2) == ()  # the fake has GPUs 0 and 1
    finally:
        nvml.reset_for_tests()
