"""Child-side convergence helpers: the step plan, epoch order, training clock, and the
``plan`` / ``eval`` / ``profile`` events as they reach a real pipe."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import convergence  # child modules live on sys.path (tests/runners/conftest.py)
import dltop_protocol
import pytest


def read_events(fn: Any) -> list[dict[str, Any]]:
    """Call ``fn(reporter)`` with a Reporter on a real pipe; the JSON events it wrote."""
    r, w = os.pipe()
    try:
        fn(dltop_protocol.Reporter(fd=w))
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as fh:
        return [json.loads(line) for line in fh.read().splitlines()]


def eval_steps(plan: Any) -> list[int]:
    """Every step after which the run evaluates, in order (without a time window)."""
    return [s for s in range(plan.total_steps) if plan.eval_after(s)]


def test_plan_by_epochs_counts_steps_and_evaluates_each_epoch() -> None:
    plan = convergence.Plan(n_train=1000, global_batch=64, epochs=3, iterations=999, warmup=2,
                            eval_every="epoch")
    assert (plan.steps_per_epoch, plan.total_steps, plan.measured_steps) == (15, 45, 43)
    assert plan.is_warmup(1) and not plan.is_warmup(2)
    assert eval_steps(plan) == [14, 29, 44]
    assert plan.epoch_of(14) == 1.0 and plan.epoch_of(6) == pytest.approx(7 / 15)


def test_plan_every_n_steps_counts_warmup_and_ends_with_an_eval() -> None:
    plan = convergence.Plan(n_train=1000, global_batch=100, epochs=1, iterations=5, warmup=3,
                            eval_every=4)
    assert plan.total_steps == 10
    assert eval_steps(plan) == [3, 7, 9]
    assert not plan.eval_after(10) and not plan.eval_after(-1)


def test_plan_by_iterations_and_without_evals() -> None:
    plan = convergence.Plan(None, 8, None, iterations=5, warmup=2)
    assert (plan.total_steps, plan.steps_per_epoch, plan.epoch_of(3)) == (7, None, None)
    assert eval_steps(plan) == []
    # real data by iterations, evaluated per epoch: epoch ends, then the last step
    plan = convergence.Plan(100, 30, None, iterations=6, warmup=1, eval_every="epoch")
    assert eval_steps(plan) == [2, 5, 6]


@pytest.mark.parametrize(("kw", "match"), [
    ({"n_train": 10, "global_batch": 64, "epochs": 1}, "10 samples, fewer than the batch 64"),
    ({"n_train": None, "global_batch": 4, "epochs": 1}, "epochs needs a training set"),
    ({"n_train": None, "global_batch": 4, "epochs": None, "eval_every": "epoch"},
     "needs a training set"),
    ({"n_train": 100, "global_batch": 4, "epochs": 1, "eval_every": 0}, "positive int"),
    ({"n_train": 100, "global_batch": 4, "epochs": 1, "eval_every": True}, "positive int"),
])
def test_plan_refuses(kw: dict[str, Any], match: str) -> None:
    args = {"iterations": 3, "warmup": 0, **kw}
    with pytest.raises(ValueError, match=match):
        convergence.Plan(**args)


def test_epoch_order_reshuffles_per_epoch_with_seed_plus_epoch() -> None:
    plain = convergence.EpochOrder(10, shuffle=False)
    assert plain.batch(0, 4) == [0, 1, 2, 3] and plain.batch(2, 4) == [0, 1, 2, 3]
    assert plain.is_contiguous()
    a, b = convergence.EpochOrder(10, True, seed=5), convergence.EpochOrder(10, True, seed=5)
    e0, e1 = list(a.order(0)), list(a.order(1))
    assert sorted(e0) == list(range(10)) and e0 != e1
    assert b.order(1) == e1  # the same seed gives the same order in any framework
    assert convergence.EpochOrder(10, True, seed=6).order(0) == e1  # seed + epoch
    # 10 samples, batch 3: 3 steps per epoch, the 10th sample dropped
    assert a.batch(3, 3) == e1[:3] and a.batch(5, 3) == e1[6:9]
    with pytest.raises(ValueError, match="fewer than the batch"):
        a.batch(0, 11)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_train_clock_excludes_evals_and_send_eval_reports_them() -> None:
    now = FakeClock()
    clock = convergence.TrainClock(clock=now)
    assert clock.train_s == 0.0
    clock.start()
    now.t += 2.0
    clock.start()  # later steps do not restart it
    now.t += 1.0
    plan = convergence.Plan(40, 10, 2, 0, 0, eval_every="epoch")

    def evaluate() -> tuple[float, float, int]:
        now.t += 5.0
        return 0.25, 0.9, 100

    events = read_events(lambda rep: convergence.send_eval(rep, plan, 3, clock, evaluate))
    now.t += 1.0
    assert clock.train_s == pytest.approx(4.0)
    (ev,) = events
    assert ev["event"] == "eval" and ev["v"] == 1
    assert {k: ev[k] for k in ("index", "epoch", "accuracy", "perplexity", "loss", "samples")} \
        == {"index": 3, "epoch": 1.0, "accuracy": 0.9, "perplexity": None, "loss": 0.25,
            "samples": 100}
    assert ev["eval_s"] == pytest.approx(5.0) and ev["train_s"] == pytest.approx(3.0)


def test_language_model_eval_sends_perplexity_and_nonfinite_loss_as_text() -> None:
    plan = convergence.Plan(None, 4, None, 3, 0, eval_every=2)
    clock = convergence.TrainClock()
    totals = convergence.EvalTotals()
    totals.add(math.log(5.0), None, 3)
    totals.add(math.log(5.0), None, 1)
    events = read_events(lambda rep: [
        convergence.send_eval(rep, plan, 1, clock, lambda: totals.result(language_model=True)),
        convergence.send_eval(rep, plan, 2, clock, lambda: (float("nan"), None, 4)),
        convergence.send_eval(rep, plan, 2, clock, lambda: (1e6, None, 4))])
    assert events[0]["perplexity"] == pytest.approx(5.0) and events[0]["accuracy"] is None
    assert events[0]["samples"] == 4 and events[0]["epoch"] is None
    assert events[1]["loss"] == "nan" and events[1]["perplexity"] == "inf"
    assert events[2]["perplexity"] == "inf"


def test_eval_totals_weights_batches_and_slices_cover_the_test_set() -> None:
    totals = convergence.EvalTotals()
    assert math.isnan(totals.result()[0])
    totals.add(1.0, 3, 4)
    totals.add(4.0, 1, 2)
    assert totals.result() == (pytest.approx(2.0), pytest.approx(4 / 6), 6)
    assert convergence.eval_slices(10, 4) == [(0, 4), (4, 8), (8, 10)]


def test_plan_and_profile_events() -> None:
    plan = convergence.Plan(100, 10, 2, 0, 1, eval_every="epoch")
    ops = [{"name": "aten::mm", "calls": 10, "self_cpu_ms": 5.0, "total_ms": 6.0},
           {"name": "aten::conv2d", "calls": 5, "self_cpu_ms": 9.0, "self_device_ms": None,
            "total_ms": 12.0, "shapes": [[1, 2]]}]
    ops += [{"name": f"op{i}", "calls": 1, "self_cpu_ms": 0.01, "total_ms": 0.01}
            for i in range(50)]
    events = read_events(lambda rep: [plan.report(rep, n_test=30),
                                      rep.profile(steps=5, step_ms=3.5, device="cpu", ops=ops)])
    assert events[0] == {"v": 1, "event": "plan", "iterations": 20, "steps_per_epoch": 10,
                         "epochs": 2, "n_train": 100, "n_test": 30}
    prof = events[1]
    assert (prof["event"], prof["steps"], prof["device"]) == ("profile", 5, "cpu")
    assert len(prof["ops"]) == dltop_protocol.MAX_PROFILE_OPS
    assert prof["ops"][0] == {"name": "aten::conv2d", "calls": 5, "self_cpu_ms": 9.0,
                              "self_device_ms": None, "total_ms": 12.0, "shapes": "[[1, 2]]"}
    assert prof["ops"][1]["name"] == "aten::mm" and prof["ops"][1]["shapes"] is None


def test_profile_on_cuda_orders_by_kernel_time() -> None:
    ops = [{"name": "a", "calls": 1, "self_cpu_ms": 9.0, "self_device_ms": 1.0, "total_ms": 9},
           {"name": "b", "calls": 1, "self_cpu_ms": 1.0, "self_device_ms": 4.0, "total_ms": 4}]
    (ev,) = read_events(lambda rep: rep.profile(2, 1.0, "cuda", ops))
    assert [o["name"] for o in ev["ops"]] == ["b", "a"]


def test_plan_event_by_iterations_has_no_epochs() -> None:
    plan = convergence.Plan(None, 4, None, 7, 3)
    (ev,) = read_events(lambda rep: plan.report(rep))
    assert (ev["iterations"], ev["steps_per_epoch"], ev["epochs"], ev["n_test"]) == (10, None,
                                                                                    None, None)


def test_numpy_scalars_are_sent_as_numbers() -> None:
    import numpy as np

    events = read_events(lambda rep: [
        rep.eval(index=np.int64(3), epoch=None, accuracy=np.float32(0.5), perplexity=None,
                 loss=np.float32(1.25), eval_s=np.float64(0.1), train_s=1.0,
                 samples=np.int64(8)),
        rep.iteration(0, 0.1, 4, False, np.float32(2.5))])
    assert events[0]["loss"] == 1.25 and events[0]["accuracy"] == 0.5
    assert events[0]["index"] == 3 and events[0]["samples"] == 8
    assert events[1]["loss"] == 2.5
