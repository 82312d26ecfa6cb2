"""Time windows (issue 30): ``min_time_s`` and ``warmup_s`` in the step plan and real runners."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import convergence
import pytest

from .conftest import run_runner, spec


class Clock:
    """A clock that advances ``step_s`` each time it is read (one read per decision)."""

    def __init__(self, step_s: float) -> None:
        self.t, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.t += self.step_s
        return self.t


def run(plan: Any) -> list[tuple[int, bool]]:
    return [(i, plan.is_warmup(i)) for i in plan.steps()]


def test_counts_only_without_a_window() -> None:
    plan = convergence.Plan(None, 4, None, 3, 2).timed({"min_time_s": 0, "warmup_s": 0})
    assert run(plan) == [(0, True), (1, True), (2, False), (3, False), (4, False)]
    assert plan.measured_steps == 3 and plan.total_steps == 5 and not plan.is_timed


def test_min_time_measures_past_the_iterations_until_the_window_lasted() -> None:
    # Each decision reads the clock once: 1/8 s per step (exact in binary). The window
    # opens at the first measured step's decision; 2 iterations alone last 0.25 s.
    plan = convergence.Plan(None, 4, None, 2, 1).timed({"min_time_s": 0.5},
                                                       clock=Clock(0.125))
    steps = run(plan)
    assert steps[0] == (0, True) and all(not w for _, w in steps[1:])
    assert plan.measured_steps == 4 == len(steps) - 1 and plan.total_steps == 5


def test_warmup_s_extends_the_warmup_then_counts_from_its_end() -> None:
    plan = convergence.Plan(None, 4, None, 2, 1).timed({"warmup_s": 0.3}, clock=Clock(0.125))
    steps = run(plan)
    # decisions at t = 1/8 (the first), 2/8, 3/8, 4/8: steps 0-2 warm up (2/8 s < 0.3 s)
    assert [w for _, w in steps] == [True, True, True, False, False]
    assert plan.warmup == 3 and plan.measured_steps == 2


def test_epochs_runs_ignore_a_window() -> None:
    plan = convergence.Plan(40, 8, 2, 99, 1).timed({"min_time_s": 100}, clock=Clock(0.001))
    assert len(list(plan.steps())) == 10 and not plan.is_timed


def test_ranks_take_rank_zeros_decision_only_where_the_clock_decides() -> None:
    asked: list[tuple[int, int]] = []

    def agree(code: int) -> int:  # rank 0 stops at once, whatever this rank thought
        asked.append((len(asked), code))
        return convergence.STOP

    plan = convergence.Plan(None, 4, None, 3, 1).timed({"min_time_s": 100}, agree,
                                                       clock=Clock(0.125))
    assert len(list(plan.steps())) == 4  # 1 warm-up + 3 counted: no vote before
    assert asked == [(0, convergence.MEASURE)]
    assert plan.measured_steps == 3


def test_a_rank_whose_clock_says_stop_still_asks_and_follows_rank_zero() -> None:
    # This rank's clock is far past both windows; rank 0's is not. A rank that decided
    # alone would skip the collective the others wait in.
    votes = iter([convergence.WARM, convergence.MEASURE,  # warm-up: one more, then done
                  convergence.MEASURE, convergence.MEASURE, convergence.STOP])
    asked: list[int] = []

    def agree(code: int) -> int:
        asked.append(code)
        return next(votes)

    plan = convergence.Plan(None, 4, None, 2, 1).timed({"min_time_s": 1, "warmup_s": 1},
                                                       agree, clock=Clock(10.0))
    assert [w for _, w in run(plan)] == [True, True, False, False, False, False]
    assert asked == [convergence.MEASURE, convergence.MEASURE, convergence.STOP,
                     convergence.STOP, convergence.STOP]
    assert plan.warmup == 2 and plan.measured_steps == 4


def test_the_last_evaluation_follows_the_last_step_of_a_window() -> None:
    plan = convergence.Plan(100, 10, None, 2, 0, 3).timed({"min_time_s": 0.45},
                                                          clock=Clock(0.125))
    evals = [i for i in plan.steps() if plan.eval_after(i)]
    assert plan.total_steps == 4 and evals == [2, 3]  # every 3rd step, and the last


def window_of(events: list[dict[str, Any]]) -> tuple[int, float]:
    """Measured iterations and the measured window's seconds as the parent takes it
    (docs/telemetry.md): the last warm-up step's end to the last measured step's end."""
    iters = [e for e in events if e["event"] == "iter"]
    measured = [e for e in iters if not e["warmup"]]
    start_ns = max(e["t_mono_ns"] for e in iters if e["warmup"])
    return len(measured), (measured[-1]["t_mono_ns"] - start_ns) / 1e9


@pytest.mark.slow
def test_a_campaign_run_measures_and_stores_until_min_time(tmp_path: Path) -> None:
    # Through the engine: the runs row holds what the runner really measured. LeNet at
    # batch 4 takes milliseconds a step, so 2 steps stay far below 0.5 s even on a
    # loaded host.
    prof = tmp_path / "w.toml"
    prof.write_text('[[matrix]]\nframeworks = ["torch"]\nmodels = ["lenet"]\n'
                    'batch_sizes = [4]\ndevices = ["cpu:1"]\niterations = 2\nwarmup = 1\n'
                    "min_time_s = 0.5\n")
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DLTOP_DB": str(db)})
    assert res.returncode == 0, res.stdout + res.stderr
    conn = sqlite3.connect(db)
    try:
        status, n, window_s = conn.execute(
            "select status, n_iterations, window_s from runs").fetchone()
        stored = conn.execute("select count(*) from iterations where warmup = 0").fetchone()[0]
    finally:
        conn.close()
    assert status == "ok" and n > 2 and n == stored and window_s >= 0.5


@pytest.mark.slow
@pytest.mark.jax
def test_a_jax_run_measures_until_min_time(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("lenet", framework="jax", iterations=2,
                                                  warmup=1, min_time_s=0.5), "jax_runner.py")
    assert code == 0, out
    n, window_s = window_of(events)
    assert n > 2 and window_s >= 0.5
    assert events[-1]["event"] == "done" and events[-1]["iterations"] == n


@pytest.mark.slow
@pytest.mark.tensorflow
def test_tensorflow_workers_stop_together(tmp_path: Path) -> None:
    # Two MultiWorkerMirroredStrategy worker processes: the chief's decision reaches the
    # other through an all-reduce; warmup = 0 with warmup_s makes the first step one.
    code, events, out = run_runner(tmp_path, spec("lenet", framework="tensorflow",
                                                  device="cpus:2", iterations=2, warmup=0,
                                                  min_time_s=1.0, warmup_s=0.2),
                                   "tf_runner.py", timeout=300)
    assert code == 0, out
    assert next(e["warmup"] for e in events if e["event"] == "iter") is True
    n, window_s = window_of(events)
    assert n >= 2 and window_s >= 1.0 and events[-1]["iterations"] == n


@pytest.mark.slow
def test_data_parallel_ranks_stop_together(tmp_path: Path) -> None:
    # Two gloo ranks: rank 0 decides each step the clock decides, the other follows; a
    # rank one step ahead would wait in DDP's all-reduce until the timeout. With
    # warmup = 0 and warmup_s > 0 the first step is always such a decision, however
    # slow a loaded host makes the steps; past the iterations, so is every further one.
    code, events, out = run_runner(tmp_path, spec("lenet", device="cpus:2", iterations=2,
                                                  warmup=0, min_time_s=1.0, warmup_s=0.2))
    assert code == 0, out
    assert next(e["warmup"] for e in events if e["event"] == "iter") is True
    n, window_s = window_of(events)
    assert n >= 2 and window_s >= 1.0 and events[-1]["iterations"] == n
