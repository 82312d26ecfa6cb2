"""The one measured loop (runners/child/measure.py), with each framework's sync adapter.

In process, no framework: a fake clock, a fake step whose output a fake device
finishes only when waited for, and the adapters PyTorch, TensorFlow, JAX and CNTK
hand the loop. The real runners' use of it is covered by their ``inject = "nan"``
tests (test_torch_runner, test_tf_runner, test_jax_runner, test_cntk_runner): the
injection lives in this loop only.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import convergence
import dltop_protocol
import measure
import pytest

from dltop.runners.registry import CHILD_DIR

STEP_S, SYNC_S, EVAL_S, FAULT_S = 1.0, 0.5, 10.0, 100.0


class Events:
    """A reporter that keeps what it is told."""

    def __init__(self) -> None:
        self.iters: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.last_iter_mono_ns = None

    def iteration(self, index: int, seconds: float, samples: int, warmup: bool,
                  loss: float | None) -> None:
        self.iters.append(dict(index=index, seconds=seconds, samples=samples, warmup=warmup,
                               loss=loss))

    def eval(self, **fields: Any) -> None:
        self.evals.append(fields)


class Plan:
    total_steps = 7
    measured_steps = 5

    def steps(self) -> Iterator[int]:
        return iter(range(self.total_steps))

    def epoch_of(self, step: int) -> float:
        return (step + 1) / 3

    def is_warmup(self, step: int) -> bool:
        return step < 2

    def eval_after(self, step: int) -> bool:
        return (step + 1) % 3 == 0 or step + 1 == self.total_steps


class Pending:
    """A step's output that the fake device finishes (SYNC_S later) only when waited for."""

    def __init__(self, loss: float | None, now: list[float]) -> None:
        self.loss, self.now, self.ready = loss, now, False

    def wait(self) -> None:
        if not self.ready:
            self.now[0] += SYNC_S
            self.ready = True

    def item(self) -> float | None:  # torch: .item() after cuda synchronize
        assert self.ready, "read before the device finished"
        return self.loss

    def numpy(self) -> float | None:  # TF: reading on the host waits
        self.wait()
        return self.loss

    def __getitem__(self, k: int) -> float | None:  # JAX: the outputs tuple
        assert self.ready, "read before block_until_ready"
        return [None, None, None, self.loss][k]


class Device:
    """The fake device and the step every adapter is given: 1 s of work per step."""

    def __init__(self, losses: list[float], inference: bool = False) -> None:
        self.now = [100.0]
        self.losses = losses
        self.inference = inference
        self.last: Pending | None = None

    def step(self, i: int) -> Pending:
        self.now[0] += STEP_S
        self.last = Pending(None if self.inference else self.losses[i], self.now)
        return self.last

    def timer(self) -> float:
        return self.now[0]

    def synchronize(self) -> None:
        assert self.last is not None
        self.last.wait()


class Trainer:
    """CNTK's trainer: reading the last minibatch's loss waits for the step."""

    def __init__(self, device: Device) -> None:
        self.device = device

    @property
    def previous_minibatch_loss_average(self) -> float | None:
        assert self.device.last is not None
        self.device.last.wait()
        return self.device.last.loss


# Each framework's adapter, as its runner builds it (train, then inference).
ADAPTERS: dict[str, tuple[Callable[[Device], Any], Callable[[Device], Any]]] = {
    "torch-gpu": (lambda d: measure.item(d.synchronize), lambda d: measure.item(d.synchronize)),
    "tensorflow": (lambda d: measure.host_read(), lambda d: measure.host_read(loss=False)),
    "jax": (lambda d: measure.blocked(Pending.wait, 3), lambda d: measure.blocked(Pending.wait)),
    "cntk": (lambda d: measure.loss_average(Trainer(d)), lambda d: None),
}
LOSSES = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4]


@pytest.mark.parametrize("framework", sorted(ADAPTERS))
def test_each_adapter_times_the_step_and_its_sync_and_reports_the_host_loss(
        framework: str) -> None:
    device = Device(LOSSES)
    reporter = Events()
    n = measure.run(device.step, Plan(), reporter, 16, sync=ADAPTERS[framework][0](device),
                    timer=device.timer)
    assert n == 5
    assert [e["loss"] for e in reporter.iters] == LOSSES
    assert [e["seconds"] for e in reporter.iters] == [STEP_S + SYNC_S] * 7
    assert [e["warmup"] for e in reporter.iters] == [True, True] + [False] * 5


@pytest.mark.parametrize("framework", sorted(ADAPTERS))
def test_each_inference_adapter_waits_and_reports_no_loss(framework: str) -> None:
    device = Device(LOSSES, inference=True)
    reporter = Events()
    sync = ADAPTERS[framework][1](device)

    def host_step(i: int) -> None:  # CNTK's eval returns host arrays: nothing to wait for
        device.step(i).wait()

    step = device.step if sync is not None else host_step
    measure.run(step, Plan(), reporter, 16, inject="nan", sync=sync, timer=device.timer)
    assert [e["loss"] for e in reporter.iters] == [None] * 7  # nan poisons a loss only
    assert [e["seconds"] for e in reporter.iters] == [STEP_S + SYNC_S] * 7


@pytest.mark.parametrize("framework", sorted(ADAPTERS))
def test_nan_is_injected_after_step_2_was_timed(framework: str) -> None:
    device = Device(LOSSES)
    reporter = Events()
    with pytest.raises(dltop_protocol.Diverged, match="iteration 2"):
        measure.run(device.step, Plan(), reporter, 16, inject="nan",
                    sync=ADAPTERS[framework][0](device), timer=device.timer)
    assert [e["index"] for e in reporter.iters] == [0, 1, 2]
    assert reporter.iters[2]["seconds"] == STEP_S + SYNC_S  # the same work as any step
    assert reporter.iters[1]["loss"] == 0.9 and reporter.iters[2]["loss"] != 0.8


def test_the_fault_hook_fires_once_between_iteration_0_and_step_1(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``hang``/``crash``: after iteration 0's event, before step 1's clock starts."""
    device = Device(LOSSES)
    reporter = Events()
    calls = []

    def fault_hook(inject: str, step: int) -> None:
        calls.append((inject, step, len(reporter.iters)))
        device.now[0] += FAULT_S  # a hang that ended: outside every timed window

    monkeypatch.setattr(measure.proto, "fault_hook", fault_hook)
    measure.run(device.step, Plan(), reporter, 16, lambda: (0.1, 0.5, 4), inject="hang",
                sync=measure.host_read(), timer=device.timer)
    assert calls == [("hang", 1, 1)]
    assert [e["seconds"] for e in reporter.iters] == [STEP_S + SYNC_S] * 7
    assert reporter.evals[0]["train_s"] == 3 * (STEP_S + SYNC_S) + FAULT_S  # wall, as before
    calls.clear()
    measure.run(device.step, Plan(), Events(), 16, inject=None, timer=device.timer,
                sync=measure.host_read())
    assert calls == []


def test_evaluations_run_outside_the_timed_steps() -> None:
    """A fake clock: each step takes 1 s, each evaluation 10 s; train_s counts steps only."""
    now = [100.0]
    losses = iter(LOSSES)

    def step(_i: int) -> float:
        now[0] += 1.0
        return next(losses)

    def evaluate() -> tuple[float, float, int]:
        now[0] += EVAL_S
        return 0.25, 0.5, 40

    reporter = Events()
    n = measure.run(step, Plan(), reporter, 16, evaluate, timer=lambda: now[0])
    assert n == 5
    assert [e["seconds"] for e in reporter.iters] == [1.0] * 7
    assert [(e["index"], e["train_s"], e["eval_s"]) for e in reporter.evals] == [
        (2, 3.0, 10.0), (5, 6.0, 10.0), (6, 7.0, 10.0)]
    assert reporter.evals[0]["accuracy"] == 0.5 and reporter.evals[0]["samples"] == 40


def test_a_non_finite_loss_stops_the_loop() -> None:
    losses = iter([1.0, float("inf")])
    with pytest.raises(dltop_protocol.Diverged, match="iteration 1"):
        measure.run(lambda _i: next(losses), Plan(), Events(), 4)


def test_a_time_window_extends_the_measured_steps() -> None:
    """The real Plan under ``min_time_s``: the loop asks it for each step."""
    now = [0.0]

    def step(_i: int) -> float:
        now[0] += 1.0
        return 0.5

    plan = convergence.Plan(None, 4, None, 2, 1).timed({"min_time_s": 5.0},
                                                       clock=lambda: now[0])
    reporter = Events()
    assert measure.run(step, plan, reporter, 4, timer=lambda: now[0]) == 5
    assert [e["warmup"] for e in reporter.iters] == [True] + [False] * 5


def test_no_runner_keeps_a_timed_loop_of_its_own() -> None:
    """``reporter.iteration`` is called by measure.py, by lm_loop (generation requests),
    by command_timing (an external program's steps) and by openai_runner (a server's
    requests, timed by the open-loop client: nothing of dltop's own is timed there) only."""
    callers = set()
    for path in Path(CHILD_DIR).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "iteration"):
                callers.add(path.name)
    assert callers == {"measure.py", "lm_loop.py", "command_timing.py", "openai_runner.py"}
