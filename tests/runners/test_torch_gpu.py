"""The PyTorch runner's GPU options (runners/child/torch_gpu.py) on this CPU-only host.

In-process tests of the pieces, then real runner children: ``channels_last`` runs end
to end, ``cuda_graphs`` ends ``unsupported`` with its reason, ``compile`` primes
outside the measured iterations and reports ``compile_s`` apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dltop_protocol as proto
import pytest
import torch
import torch_gpu
import torch_models

from .conftest import run_runner, spec


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def test_channels_last_converts_model_and_image_batches_once() -> None:
    s = spec("alexnet-r", channels_last=True)
    model = torch_gpu.prepare(torch_models.build("alexnet-r"), s)
    conv = model[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert not conv.is_contiguous()  # really NHWC, not a 1x1 kernel that is both
    fixed = (torch.rand(2, 3, 32, 32), torch.zeros(2, dtype=torch.long))
    nb = torch_gpu.batches(lambda: fixed, s)
    x1, _ = nb()
    x2, _ = nb()
    assert x1.is_contiguous(memory_format=torch.channels_last) and not x1.is_contiguous()
    assert x1 is x2  # the same device batch is converted once, not every step
    assert torch.equal(x1, fixed[0])


def test_without_channels_last_nothing_changes() -> None:
    s = spec("alexnet-r")
    fixed = (torch.rand(2, 3, 32, 32), torch.zeros(2, dtype=torch.long))
    nb = torch_gpu.batches(lambda: fixed, s)
    assert nb() is fixed
    assert torch_gpu.compiled(torch.nn.Linear(2, 2), s).__class__ is torch.nn.Linear


@pytest.mark.parametrize(("device", "kw", "world", "reason"), [
    ("cpu", {}, 1, "cuda_graphs needs a CUDA GPU; this run is on cpu"),
    ("cuda", {}, 2, "not supported with 2 data-parallel GPUs"),
    ("cuda", {"precision": "fp16"}, 1, "cannot capture fp16 training"),
    ("cuda", {"torch_compile": "default"}, 1, "exclude each other"),
])
def test_cuda_graphs_refusals(device: str, kw: dict[str, Any], world: int,
                              reason: str) -> None:
    s = spec("alexnet-r", cuda_graphs=True, **kw)
    with pytest.raises(proto.Unsupported, match=reason):
        torch_gpu.check(s, torch.device(device), world)


def test_cuda_graphs_on_one_gpu_in_bf16_passes_the_checks() -> None:
    s = spec("resnet-56", cuda_graphs=True, precision="bf16")
    torch_gpu.check(s, torch.device("cuda", 0), 1)  # no exception: capture is tried


@pytest.mark.slow
def test_channels_last_cpu_run_end_to_end(tmp_path: Path) -> None:
    runs = {}
    for cl in (False, True):
        code, events, out = run_runner(tmp_path, spec("alexnet-r", batch_size=4, iterations=3,
                                                      warmup=1, channels_last=cl))
        assert code == 0, out
        assert [e["event"] for e in events] == ["hello", "model", "plan"] + ["iter"] * 4 + [
            "done"]
        runs[cl] = [e["loss"] for e in of(events, "iter")]
    # The layout changes the kernels, not the math.
    assert runs[True] == pytest.approx(runs[False], rel=1e-4)


@pytest.mark.slow
def test_cuda_graphs_on_cpu_ends_unsupported_with_the_reason(tmp_path: Path) -> None:
    code, events, _out = run_runner(tmp_path, spec("alexnet-r", cuda_graphs=True))
    assert code != 0
    (error,) = of(events, "error")
    assert error["kind"] == "unsupported"
    assert "cuda_graphs needs a CUDA GPU; this run is on cpu" in error["message"]
    assert not of(events, "iter")


@pytest.mark.slow
def test_compile_primes_before_the_first_iteration(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("fcn-r", iterations=2, warmup=0,
                                                  torch_compile="default"), timeout=540)
    assert code == 0, out
    names = [e["event"] for e in events]
    assert names == ["hello", "model", "plan", "setup", "iter", "iter", "done"]
    (setup,) = of(events, "setup")
    assert setup["compile_s"] > 0 and "capture_s" not in setup
    # No warm-up asked for: the priming steps are not iterations, so only the two
    # measured ones are reported, indexed from 0.
    assert [(e["index"], e["warmup"]) for e in of(events, "iter")] == [(0, False), (1, False)]


class _Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def emit(self, event: str, **fields: Any) -> None:
        self.sent.append((event, fields))


def test_prime_sends_setup_only_when_something_was_set_up() -> None:
    calls = []

    def step() -> float:
        calls.append(1)
        return 0.0

    events = _Events()
    torch_gpu.prime(step, spec("fcn-r"), events)
    assert events.sent == [] and calls == []
    step.capture_s = 0.25  # type: ignore[attr-defined] - as _graphed sets it
    torch_gpu.prime(step, spec("fcn-r", torch_compile="reduce-overhead"), events)
    assert len(calls) == 3  # reduce-overhead records its graphs on the later calls
    ((name, fields),) = events.sent
    assert name == "setup" and fields["capture_s"] == 0.25 and fields["compile_s"] >= 0
