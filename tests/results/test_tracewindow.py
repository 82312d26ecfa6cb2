"""The time window a run's charts show: from the first iteration, y fitted to the
measured steps (issue 31 item 2), in the core and in the TUI's chart specs."""

from __future__ import annotations

import pytest

from dltop.results.runtrace import GpuPoint, GpuSeries, IterPoint, RunTrace
from dltop.results.tracewindow import window
from dltop.tui.charts import build_chart, chart_spec


def h200_like() -> RunTrace:
    """The H200 check's run 1, in shape: 8.8 s of start-up, a 2.66 s cuDNN warm-up
    step, then 55 ms steps; GPU readings from the start."""
    its, t = [], 6.2
    for i in range(50):
        s = 2.66 if i == 0 else 0.055 + 0.001 * (i % 3)
        t += s
        its.append(IterPoint(i, t, s, i < 10, 7.0 - 0.03 * i, 256))
    gpu = GpuSeries(0, False, tuple(GpuPoint(0.5 * k, 50.0, 2**30, 300.0, 40.0, 1980.0)
                                    for k in range(24)))
    return RunTrace(1, tuple(its), (gpu,), (), 50, 1, False, warmup_end_s=its[9].t_end_s)


def test_window_starts_at_the_first_iteration_and_fits_the_measured_steps() -> None:
    tr = h200_like()
    w = window(((p.t_end_s or 0.0, p.seconds, p.warmup) for p in tr.iterations),
               tr.duration_s)
    assert w is not None
    assert w.first_s == pytest.approx(6.2) and w.startup_s == pytest.approx(6.2)
    assert 5.8 < w.x_start_s < 6.2  # a narrow start-up band, not 6 s of empty axis
    assert w.x_end_s == pytest.approx(11.6, abs=0.01)
    assert w.y_cap_s is not None and 0.057 < w.y_cap_s < 0.07  # measured max 0.057 ×1.15
    assert w.clipped == 1 and w.slowest_s == pytest.approx(2.66)


def test_no_clipping_when_every_step_fits() -> None:
    w = window([(1.0, 0.5, True), (1.5, 0.5, False), (2.1, 0.6, False)])
    assert w is not None and w.y_cap_s is None and w.clipped == 0
    assert window([]) is None


def test_tui_charts_start_at_the_iterations_and_clip_the_warmup() -> None:
    tr = h200_like()
    it = chart_spec(tr, "iter")
    assert it.xlim is not None and 5.8 < it.xlim[0] < 6.2 and it.start == pytest.approx(6.2)
    assert it.ymax is not None and it.ymax < 0.07
    assert max(v for s in it.series for v in s[2] if v is not None) <= it.ymax
    assert "1 clipped (max 2.66 s)" in it.title and "start-up 6.2 s" in it.title
    power = chart_spec(tr, "power")  # telemetry on the same axis, start-up readings cut
    assert power.xlim == it.xlim
    text = build_chart(power, 60, 10, "dark").plain
    assert "GPU power W" in text
