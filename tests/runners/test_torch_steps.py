"""The PyTorch runner's steps, their sync and evaluation, in process on tiny models."""

from __future__ import annotations

import math

import dltop_protocol
import measure
import pytest
import torch
import torch.nn.functional as F
import torch_data
import torch_train

from .test_measure import Events, Plan

CPU = torch.device("cpu")


def test_inference_step_leaves_batch_norm_statistics_and_builds_no_graph() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                torch.nn.Dropout(0.5)).eval()
    x = torch.randn(1, 4)
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append(o))
    before = model[1].running_mean.clone()
    step = torch_train.inference_step(model, lambda: (x, None), None)
    assert step() is None and step() is None
    torch.testing.assert_close(model[1].running_mean, before)
    assert all(not o.requires_grad and torch.equal(o, seen[0]) for o in seen)  # dropout off


def test_the_train_step_runs_through_the_shared_loop() -> None:
    """torch_runner's pieces: train_step, its sync adapter, measure.run; nan after step 2."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    step = torch_train.train_step(model, opt, F.cross_entropy, lambda: (x, y), None, None)
    sync = torch_train.synchronizer(CPU)
    reporter = Events()
    assert measure.run(step, Plan(), reporter, 8, sync=sync) == 5
    losses = [e["loss"] for e in reporter.iters]
    assert all(isinstance(v, float) for v in losses) and losses[-1] < losses[0]
    with pytest.raises(dltop_protocol.Diverged, match="iteration 2"):
        measure.run(step, Plan(), Events(), 8, inject="nan", sync=sync)


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
