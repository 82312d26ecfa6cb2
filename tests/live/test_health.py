"""The run panel's judgements as pure functions: stall bound, loss trend, campaign ETA."""

from __future__ import annotations

import math

from dltop.live.health import (
    FIRST_ITERATION_S,
    CampaignEta,
    FinishedRate,
    PendingWork,
    approx_duration,
    campaign_eta,
    loss_trend,
    stall,
    stall_bound_s,
)


def test_stall_bound_is_five_seconds_or_ten_median_steps() -> None:
    assert stall_bound_s(0.1) == 5.0
    assert stall_bound_s(2.0) == 20.0
    assert stall_bound_s(None) == FIRST_ITERATION_S


def test_stall_after_the_bound_only() -> None:
    quiet = stall(now_s=1000.0, last_iteration_s=996.0, started_s=900.0, median_step_s=0.1)
    assert quiet is not None and not quiet.stalled and quiet.quiet_s == 4.0
    hung = stall(now_s=1000.0, last_iteration_s=994.0, started_s=900.0, median_step_s=0.1)
    assert hung is not None and hung.stalled and hung.bound_s == 5.0
    slow = stall(now_s=1000.0, last_iteration_s=985.0, started_s=900.0, median_step_s=2.0)
    assert slow is not None and not slow.stalled  # 15 s < 10 x 2 s


def test_stall_before_the_first_iteration_uses_the_start_up_bound() -> None:
    starting = stall(now_s=1000.0, last_iteration_s=None, started_s=950.0, median_step_s=None)
    assert starting is not None and starting.first and not starting.stalled
    stuck = stall(now_s=1000.0, last_iteration_s=None, started_s=1000.0 - FIRST_ITERATION_S - 1,
                  median_step_s=None)
    assert stuck is not None and stuck.stalled
    # iterations whose rows carry no wall time: nothing can be told
    assert stall(1000.0, None, 950.0, 0.1) is None
    assert stall(1000.0, None, None, None) is None


def test_loss_trend_compares_halves_and_skips_non_finite() -> None:
    falling = loss_trend([2.0, 1.9, None, 1.5, math.nan, 1.2, 1.0])
    assert falling is not None and falling.direction == "falling" and falling.arrow == "↓"
    assert falling.last == 1.0 and falling.change < 0
    rising = loss_trend([1.0, 1.0, 2.0, 2.0, math.inf])
    assert rising is not None and rising.direction == "rising" and rising.last == 2.0
    flat = loss_trend([1.0, 1.001, 0.999, 1.0])
    assert flat is not None and flat.direction == "flat" and flat.arrow == "→"
    few = loss_trend([3.0, 1.0])
    assert few is not None and few.direction == "flat" and few.last == 1.0
    assert loss_trend([None, math.nan]) is None
    assert loss_trend([]) is None


def test_campaign_eta_uses_each_configs_own_pace_else_the_overall_one() -> None:
    a, b, c = ("torch", "fcn"), ("torch", "resnet"), ("tf", "fcn")
    finished = [FinishedRate(a, runs=2, iterations=200, wall_s=20.0),   # 0.1 s/it
                FinishedRate(b, runs=3, iterations=300, wall_s=150.0)]  # 0.5 s/it
    pending = [PendingWork(a, jobs=1, iterations=100),   # 10 s
               PendingWork(b, jobs=2, iterations=200),   # 100 s
               PendingWork(c, jobs=1, iterations=50)]    # overall 170/500 s/it: 17 s
    eta = campaign_eta(finished, pending, current_left_s=3.0)
    assert eta.from_runs == 5 and eta.jobs_left == 5
    assert eta.seconds is not None and math.isclose(eta.seconds, 10 + 100 + 17 + 3)
    assert eta.text() == "ETA ≈ 2 min (from 5 finished runs)"


def test_campaign_eta_learns_each_runs_start_up_and_its_window_from_finished_runs() -> None:
    """Two finished runs of 10 s wall, 50 measured iterations in 4 s each: 6 s of start-up,
    compile and warm-up per run, 0.08 s/it. Spreading wall time over iterations (the
    old estimate) said 0.2 s/it and nothing fixed: 20 iterations were 4 s, not 10 s."""
    a, b = ("torch", "fcn"), ("jax", "fcn")
    finished = [FinishedRate(a, runs=2, iterations=100, wall_s=20.0, measured_s=8.0)]
    # A job of `a` asks 20 iterations, but its time window made the finished runs take 50.
    own = campaign_eta(finished, [PendingWork(a, jobs=1, iterations=20)])
    assert own.seconds is not None and math.isclose(own.seconds, 6.0 + 50 * 0.08)
    # An unseen configuration pays the learnt start-up too; a started run does not.
    other = campaign_eta(finished, [PendingWork(b, jobs=2, iterations=60),
                                    PendingWork(("",), 1, 10, started=True)])
    assert other.seconds is not None
    assert math.isclose(other.seconds, 2 * 6.0 + 60 * 0.08 + 10 * 0.08)
    assert other.jobs_left == 3


def test_campaign_eta_unknown_before_any_finished_run_and_done_without_jobs() -> None:
    eta = campaign_eta([], [PendingWork(("x",), 3, 300)])
    assert eta.seconds is None and eta.jobs_left == 3
    assert eta.text().startswith("ETA unknown")
    assert campaign_eta([FinishedRate(("x",), 1, 10, 1.0)], []).text() == "no job left"
    assert CampaignEta(40.0, 1, 1).text() == "ETA ≈ 40 s (from 1 finished run)"


def test_approx_duration() -> None:
    assert approx_duration(12.4) == "12 s"
    assert approx_duration(720) == "12 min"
    assert approx_duration(3 * 3600 + 20 * 60) == "3 h 20 min"
