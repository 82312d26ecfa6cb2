"""precision fp8 in the PyTorch runner: refused with the reason where it cannot run.

No GPU of compute capability 8.9 here: the capability is faked at the hardware boundary
(``torch.cuda``'s two queries), and torchao is not installed in the test environment,
so what is proven is the refusals, not an fp8 step (docs/profiles.md says so)."""

from __future__ import annotations

import sys
from pathlib import Path

import dltop_protocol as proto
import pytest
import torch
import torch_fp8
import torch_lm

from .conftest import run_runner, spec


def fake_gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int]) -> torch.device:
    """FAKE: a CUDA device of ``capability`` as torch.cuda reports it (no GPU here)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "FAKE GPU")
    return torch.device("cuda", 0)


@pytest.mark.slow  # a runner process (PyTorch import)
def test_fp8_on_a_cpu_ends_unsupported_with_the_reason(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("gpt-tiny", precision="fp8",
                                                  fp8_recipe="tensorwise", seq_len=16))
    assert code == 3, out
    assert events[-1]["kind"] == "unsupported"
    assert events[-1]["message"] == ("Unsupported: precision fp8 needs a GPU of compute "
                                     "capability 8.9 or later (H100, H200, L40S); this run "
                                     "is on cpu")


def test_a_compute_capability_8_0_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    device = fake_gpu(monkeypatch, (8, 0))
    with pytest.raises(proto.Unsupported, match=r"FAKE GPU is compute capability 8\.0$"):
        torch_fp8.check_device(device)


@pytest.mark.slow  # spawns dltop or runner processes: over 1 s idle
def test_without_torchao_the_run_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    device = fake_gpu(monkeypatch, (9, 0))
    monkeypatch.setitem(sys.modules, "torchao", None)  # absent, installed or not
    model = torch_lm.build("gpt-tiny", device="meta")
    with pytest.raises(proto.Unsupported) as info:
        torch_fp8.convert(model, {"fp8_recipe": "rowwise"}, device)
    assert str(info.value).startswith("torchao not installed (precision fp8 trains through "
                                      "torchao's float8 training: pip install torchao")


@pytest.mark.slow  # builds PyTorch models: over 2 s
def test_the_tied_output_projection_and_odd_sizes_stay_in_bf16() -> None:
    model = torch_lm.build("gpt2-small", device="meta")
    assert not torch_fp8._convertible(model.lm_head, "lm_head")
    assert torch_fp8._convertible(model.blocks[0].qkv, "blocks.0.qkv")
    assert not torch_fp8._convertible(torch.nn.Linear(768, 50257, device="meta"), "x")
