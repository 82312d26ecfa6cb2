"""The parent's checks of the issue-17 events: plan, eval, profile (jobs.protocol_evals)."""

from __future__ import annotations

from typing import Any

import pytest

from dltop.jobs.protocol import EventChecker


def plan(**over: Any) -> dict[str, Any]:
    return {"v": 1, "event": "plan", "iterations": 120, "steps_per_epoch": 40, "epochs": 3,
            "n_train": 640, "n_test": 100, **over}


def evaluation(**over: Any) -> dict[str, Any]:
    return {"v": 1, "event": "eval", "index": 39, "epoch": 1.0, "accuracy": 0.91,
            "perplexity": None, "loss": 0.3, "eval_s": 0.2, "train_s": 4.5, "samples": 100,
            **over}


def op(**over: Any) -> dict[str, Any]:
    return {"name": "aten::mm", "calls": 10, "self_cpu_ms": 3.0, "self_device_ms": None,
            "total_ms": 4.0, "shapes": "[[8, 8]]", **over}


def profile(**over: Any) -> dict[str, Any]:
    return {"v": 1, "event": "profile", "steps": 5, "step_ms": 12.5, "device": "cpu",
            "ops": [op()], **over}


@pytest.mark.parametrize("event", [
    plan(), plan(steps_per_epoch=None, epochs=None, n_train=None, n_test=None),
    evaluation(), evaluation(accuracy=None, perplexity=143.2), evaluation(loss="nan"),
    evaluation(epoch=None, samples=None), evaluation(accuracy=0), evaluation(accuracy=1),
    evaluation(perplexity="inf"), evaluation(eval_s=0),
    profile(), profile(device="cuda", ops=[op(self_device_ms=2.5)]), profile(ops=[]),
    profile(ops=[op(shapes=None)] * 40),
])
def test_valid_events_pass(event: dict[str, Any]) -> None:
    assert EventChecker().problem(event) is None


@pytest.mark.parametrize(("event", "says"), [
    (plan(iterations=0), "iterations 0"), (plan(iterations=None), "iterations None"),
    (plan(iterations=2.5), "iterations 2.5"), (plan(epochs=0), "epochs 0"),
    (plan(n_train=-1), "n_train -1"), (plan(iterations=2**64), "out of range"),
    (evaluation(index=-1), "index -1"), (evaluation(accuracy=1.5), "accuracy 1.5"),
    (evaluation(accuracy=float("nan")), "accuracy nan"), (evaluation(accuracy="0.9"),
                                                          "accuracy '0.9'"),
    (evaluation(eval_s=-0.1), "eval_s -0.1"), (evaluation(train_s=None), "train_s None"),
    (evaluation(train_s=float("inf")), "train_s inf"), (evaluation(train_s=1e12), "train_s"),
    (evaluation(epoch=-1), "epoch -1"), (evaluation(samples=0), "samples 0"),
    (evaluation(loss="x"), "loss 'x'"), (evaluation(perplexity=0), "perplexity 0"),
    (evaluation(index=True), "index True"), (evaluation(t_mono_ns=-1), "t_mono_ns -1"),
    (profile(steps=0), "steps 0"), (profile(step_ms=0), "step_ms 0"),
    (profile(device="gpu"), "device 'gpu'"), (profile(ops={"a": 1}), "ops is not a list"),
    (profile(ops=[op()] * 41), "at most 40"), (profile(ops=[op(), 3]), "ops.1 3"),
    (profile(ops=[op(name="")]), "ops.0.name ''"), (profile(ops=[op(calls=-2)]),
                                                    "ops.0.calls -2"),
    (profile(ops=[op(self_cpu_ms=float("nan"))]), "ops.0.self_cpu_ms nan"),
    (profile(ops=[op(self_device_ms=-1)]), "ops.0.self_device_ms -1"),
    (profile(ops=[op(total_ms=None)]), "ops.0.total_ms None"),
    (profile(ops=[op(shapes=[8, 8])]), "ops.0.shapes [8, 8]"),
])
def test_a_bad_field_is_refused_with_its_name(event: dict[str, Any], says: str) -> None:
    problem = EventChecker().problem(event)
    assert problem is not None and problem.startswith(f"{event['event']} event: ")
    assert says in problem, problem


def test_eval_indexes_must_increase_and_refused_ones_do_not_count() -> None:
    checker = EventChecker()
    assert checker.problem(evaluation(index=9)) is None
    assert "index 9 repeats" in str(checker.problem(evaluation(index=9)))
    assert "accuracy" in str(checker.problem(evaluation(index=19, accuracy=2)))
    assert checker.problem(evaluation(index=19)) is None
    # iterations and evaluations count apart: an eval after step 19 and iteration 5 agree
    assert checker.problem({"event": "iter", "index": 5, "seconds": 0.1}) is None
