"""The PyTorch runner as a real child process speaking protocol v1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .conftest import run_runner, spec, write_cifar_python, write_mnist

pytestmark = pytest.mark.slow


def kinds(events: list[dict[str, object]]) -> list[object]:
    return [e["event"] for e in events]


@pytest.mark.parametrize("model", ["fcn-r", "alexnet-r", "resnet-56", "lstm"])
def test_synthetic_run_reports_every_iteration(tmp_path: Path, model: str) -> None:
    code, events, out = run_runner(tmp_path, spec(model, iterations=2, warmup=1))
    assert code == 0, out
    assert kinds(events) == ["hello", "model", "plan", "iter", "iter", "iter", "done"]
    hello = events[0]
    assert hello["framework"] == "torch" and hello["threads"] == 1
    assert [e["warmup"] for e in events if e["event"] == "iter"] == [True, False, False]
    assert all(e["seconds"] > 0 and e["samples"] == 4 for e in events if e["event"] == "iter")
    assert "[dltop] run 1: torch" in out


def test_diverged(tmp_path: Path) -> None:
    code, events, _ = run_runner(tmp_path, spec(iterations=4, options={"inject": "nan"}))
    assert code == 3
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "diverged"


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_gpu_only_precisions_are_unsupported_on_cpu(tmp_path: Path, precision: str) -> None:
    code, events, _ = run_runner(tmp_path, spec(precision=precision))
    assert code == 3 and events[-1]["kind"] == "unsupported"
    assert "needs a GPU" in str(events[-1]["message"])


def test_bf16_autocast_runs_on_cpu(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("alexnet-r", precision="bf16"))
    assert code == 0, out
    assert events[-1]["event"] == "done"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_without_cuda_is_unsupported(tmp_path: Path) -> None:
    code, events, _ = run_runner(tmp_path, spec(device="gpu:1"))
    assert code == 3 and events[-1]["kind"] == "unsupported"
    assert "CUDA is not available" in str(events[-1]["message"])


def test_real_mnist_and_cifar(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=10)
    code, events, out = run_runner(tmp_path, spec("fcn-r", data="real",
                                                  data_dir=str(tmp_path)))
    assert code == 0, out
    write_cifar_python(tmp_path, n=8)
    code, events, out = run_runner(tmp_path, spec("alexnet-r", data="real",
                                                  data_dir=str(tmp_path)))
    assert code == 0, out
    code, events, _ = run_runner(tmp_path, spec("alexnet-s", data="real",
                                                data_dir=str(tmp_path)))
    assert code == 3 and events[-1]["kind"] == "unsupported"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_cuda_run(tmp_path: Path) -> None:
    import os

    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    code, events, out = run_runner(tmp_path, spec("fcn-r", device="gpu:1", batch_size=64))
    assert code == 0, out
    assert "cuda" in str(events[0]["device"])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_cuda_ddp_two_gpus(tmp_path: Path) -> None:
    import os

    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    code, events, out = run_runner(tmp_path, spec("fcn-r", device="gpu:2", batch_size=64))
    assert code == 0, out
    assert events[0]["world_size"] == 2
