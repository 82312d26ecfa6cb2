"""The generated data sets can actually be learned: a small PyTorch model, trained here in a
plain loop on what ``datasets.real_split`` reads back, ends far above chance on the test
files within a few hundred steps (seconds on one CPU core).

The loop follows the convergence plan the runners use (``convergence.Plan`` for the
steps and evaluation points, ``EpochOrder`` for the shuffled batches), so these tests
also check that the pieces fit together. No wall-time assertion: step counts are fixed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import convergence  # child modules live on sys.path (tests/runners/conftest.py)
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dltop.runners.child import datasets
from dltop.runners.child import torch_models as tm

pytestmark = pytest.mark.slow  # trains three models to accuracy

BATCH = 64


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread and a fixed seed: the machine is shared, results repeatable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


def image_tensors(model: str, data_dir: Path) -> tuple[torch.Tensor, ...]:
    _, shape, (x, y, n), test = datasets.real_split(model, str(data_dir), need_test=True)
    tx, ty, m = test

    def pixels(raw: bytes, count: int) -> torch.Tensor:
        return torch.from_numpy(np.frombuffer(raw, np.uint8).reshape((count, *shape))
                                .astype(np.float32) / 255.0)

    def labels(raw: bytes) -> torch.Tensor:
        return torch.from_numpy(np.frombuffer(raw, np.uint8).astype(np.int64))

    return pixels(x, n), labels(y), pixels(tx, m), labels(ty)


def train(net: nn.Module, x: torch.Tensor, y: torch.Tensor, tx: torch.Tensor,
          ty: torch.Tensor, epochs: int, lr: float,
          loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
          ) -> list[dict[str, Any]]:
    """Train by the runners' plan; the eval after each epoch (mean loss, accuracy)."""
    plan = convergence.Plan(len(x), BATCH, epochs, 0, 2, eval_every="epoch")
    order = convergence.EpochOrder(len(x), shuffle=True, seed=0)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    evals = []
    for step in range(plan.total_steps):
        idx = torch.tensor(order.batch(step, BATCH, plan.steps_per_epoch))
        loss = loss_fn(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if plan.eval_after(step):
            totals = convergence.EvalTotals()
            with torch.no_grad():
                for i, j in convergence.eval_slices(len(tx), 500):
                    out = net(tx[i:j])
                    # a language model (one target per token) has no accuracy here
                    correct = None if ty.dim() > 1 else int((out.argmax(-1) == ty[i:j]).sum())
                    totals.add(float(loss_fn(out, ty[i:j])), correct, j - i)
            mean_loss, accuracy, _ = totals.result(language_model=ty.dim() > 1)
            evals.append({"epoch": plan.epoch_of(step), "loss": mean_loss,
                          "accuracy": accuracy})
    return evals


def test_generated_mnist_trains_lenet_far_above_chance(synth_data: Callable[[str], Path]
                                                      ) -> None:
    x, y, tx, ty = image_tensors("lenet", synth_data("mnist"))
    evals = train(tm.build("lenet"), x, y, tx, ty, epochs=2, lr=2e-3)
    assert [e["epoch"] for e in evals] == [1.0, 2.0]
    assert evals[-1]["accuracy"] > 0.8, evals  # chance: 0.1
    assert evals[-1]["loss"] < 0.5 * math.log(10), evals


def test_generated_cifar10_trains_a_small_convnet(synth_data: Callable[[str], Path]) -> None:
    x, y, tx, ty = image_tensors("alexnet-r", synth_data("cifar10"))
    # 1200 training samples: a part of the set is enough and keeps this quick
    net = nn.Sequential(nn.Conv2d(3, 8, 5, stride=2, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    evals = train(net, x[:1200], y[:1200], tx, ty, epochs=2, lr=5e-3)
    assert evals[-1]["accuracy"] > 0.8, evals


def test_generated_ptb_trains_a_small_lstm_to_low_perplexity(
        synth_data: Callable[[str], Path]) -> None:
    _, shape, (x, y, n), test = datasets.real_split("lstm", str(synth_data("ptb")),
                                                    need_test=True)
    tx, ty, m = test
    vocab = max(max(x), max(tx)) + 1
    assert vocab <= 210  # the generated text's 200 words, <eos> and <unk>

    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, 32)
            self.lstm = nn.LSTM(32, 64, batch_first=True)
            self.out = nn.Linear(64, vocab)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.out(self.lstm(self.embed(ids))[0])
            return out

    def seq_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, vocab), target.reshape(-1))

    def ids(values: list[int], count: int) -> torch.Tensor:
        return torch.tensor(values).reshape(count, *shape)

    evals = train(Small(), ids(x, n), ids(y, n), ids(tx, m), ids(ty, m), epochs=3, lr=1e-2,
                  loss_fn=seq_loss)
    perplexity = convergence.perplexity(evals[-1]["loss"])
    # a uniform guess has perplexity ~200; the chain's best is about 3
    assert perplexity < 8, evals
    assert evals[-1]["loss"] < evals[0]["loss"] or evals[0]["loss"] < math.log(8)
