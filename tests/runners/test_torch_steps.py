"""The PyTorch runner's steps, loop and evaluation, in process on tiny models."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import dltop_protocol
import pytest
import torch
import torch.nn.functional as F
import torch_data
import torch_train

CPU = torch.device("cpu")


class Events:
    """A reporter that keeps what it is told."""

    def __init__(self) -> None:
        self.iters: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []

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


def test_inference_step_leaves_batch_norm_statistics_and_builds_no_graph() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                torch.nn.Dropout(0.5)).eval()
    x = torch.randn(1, 4)
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append(o))
    before = model[1].running_mean.clone()
    step = torch_train.inference_step(model, lambda: (x, None), None, CPU)
    assert step() is None and step() is None
    torch.testing.assert_close(model[1].running_mean, before)
    assert all(not o.requires_grad and torch.equal(o, seen[0]) for o in seen)  # dropout off


def test_run_steps_evaluates_outside_the_timed_steps() -> None:
    """A fake clock: each step takes 1 s, each evaluation 10 s; train_s counts steps only."""
    now = [100.0]
    losses = iter([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4])

    def step() -> float:
        now[0] += 1.0
        return next(losses)

    def evaluate() -> tuple[float, float, int]:
        now[0] += 10.0
        return 0.25, 0.5, 40

    reporter = Events()
    n = torch_train.run_steps(step, Plan(), reporter, 16, evaluate, timer=lambda: now[0])
    assert n == 5
    assert [e["warmup"] for e in reporter.iters] == [True, True] + [False] * 5
    assert [e["seconds"] for e in reporter.iters] == [1.0] * 7
    assert [(e["index"], e["train_s"], e["eval_s"]) for e in reporter.evals] == [
        (2, 3.0, 10.0), (5, 6.0, 10.0), (6, 7.0, 10.0)]
    assert reporter.evals[0]["accuracy"] == 0.5 and reporter.evals[0]["samples"] == 40


def test_run_steps_stops_on_a_non_finite_loss() -> None:
    losses = iter([1.0, float("nan")])
    with pytest.raises(dltop_protocol.Diverged, match="iteration 1"):
        torch_train.run_steps(lambda: next(losses), Plan(), Events(), 4)


def test_evaluate_accuracy_and_loss() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    x = torch.randint(0, 256, (10, 6), dtype=torch.uint8)
    y = model(torch_data.model_input(x)).argmax(-1)
    y[:3] = (y[:3] + 1) % 3  # three wrong
    part = (x.numpy().tobytes(), y.to(torch.uint8).numpy().tobytes(), 10)
    parts, to_device = torch_data.test_batches("mnist", (6,), part, 4, CPU)
    assert [len(p[1]) for p in parts] == [4, 4, 2]
    model.train()
    loss, acc, ppl, samples = torch_train.evaluate(model, parts, to_device, None)
    assert model.training  # restored
    assert acc == pytest.approx(0.7) and ppl is None and samples == 10
    with torch.no_grad():
        expect = F.cross_entropy(model(torch_data.model_input(x)), y).item()
    assert loss == pytest.approx(expect, rel=1e-5)
    # A data-parallel rank evaluates its own share of the batches.
    parts1, _ = torch_data.test_batches("mnist", (6,), part, 4, CPU, rank=1, world=2)
    assert [len(p[1]) for p in parts1] == [4]


def test_evaluate_perplexity_for_a_language_model() -> None:
    vocab = 5
    model = torch.nn.Embedding(vocab, vocab)
    ids = [i % vocab for i in range(12)]
    part = (ids, [*ids[1:], 0], 4)
    parts, to_device = torch_data.test_batches("ptb", (3,), part, 2, CPU)
    loss, acc, ppl, samples = torch_train.evaluate(model, parts, to_device, None, vocab=vocab)
    assert acc is None and samples == 4
    assert ppl == pytest.approx(math.exp(loss))


def test_order_gives_each_rank_its_share_of_the_global_batch() -> None:
    def epoch_order(epoch: int) -> list[int]:
        return list(range(10))[::-1] if epoch % 2 else list(range(10))

    r0 = torch_data.Order(10, 4, 2, 0, epoch_order)
    r1 = torch_data.Order(10, 4, 2, 1, epoch_order)
    assert r0.steps_per_epoch == 2  # 10 // 4, the last partial batch dropped
    assert [r0.indices(s).tolist() for s in range(3)] == [[0, 1], [4, 5], [9, 8]]
    assert [r1.indices(s).tolist() for s in range(3)] == [[2, 3], [6, 7], [7, 6]]
    with pytest.raises(ValueError, match="fewer than the batch"):
        torch_data.Order(3, 4, 4, 0, epoch_order)
