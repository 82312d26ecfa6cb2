"""The PyTorch runner's inference mode, op profile and host loader, as a real child process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import run_runner, spec, write_mnist

pytestmark = pytest.mark.slow


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


@pytest.mark.parametrize("model", ["resnet-56", "lstm"])
def test_inference_at_batch_1_reports_null_losses(tmp_path: Path, model: str) -> None:
    # resnet-56 has batch norm: inference runs it on its running statistics.
    code, events, out = run_runner(tmp_path, spec(model, batch_size=1, mode="inference",
                                                  iterations=3, warmup=1))
    assert code == 0, out
    assert [e["event"] for e in events] == ["hello", "model", "plan"] + ["iter"] * 4 + ["done"]
    assert of(events, "plan")[0]["iterations"] == 4
    iters = of(events, "iter")
    assert all(e["loss"] is None and e["samples"] == 1 and e["seconds"] > 0 for e in iters)
    assert [e["warmup"] for e in iters] == [True, False, False, False]
    assert events[-1]["iterations"] == 3


def test_op_profile_comes_after_the_measured_iterations(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("alexnet-r", iterations=3, warmup=1,
                                                  op_profile=True, batch_size=8))
    assert code == 0, out
    names = [e["event"] for e in events]
    assert names == ["hello", "model", "plan"] + ["iter"] * 4 + ["profile", "done"]
    assert [e["index"] for e in of(events, "iter")] == [0, 1, 2, 3]
    assert events[-1]["iterations"] == 3
    prof = of(events, "profile")[0]
    assert prof["steps"] == 5 and prof["device"] == "cpu" and prof["step_ms"] > 0
    ops = prof["ops"]
    assert 5 < len(ops) <= 40
    self_ms = [o["self_cpu_ms"] for o in ops]
    assert self_ms == sorted(self_ms, reverse=True)
    assert all(o["self_device_ms"] is None and o["calls"] >= 1 for o in ops)
    assert all(o["total_ms"] >= o["self_cpu_ms"] - 1e-6 for o in ops)
    by_name = {o["name"]: o for o in ops}
    # Five profiled steps of alexnet-r: three convolutions forward each.
    conv = [o for o in ops if "conv" in o["name"]]
    assert conv, sorted(by_name)
    assert any(o["shapes"] and "[8, 3, 32, 32]" in o["shapes"] for o in conv), conv


def test_no_profile_unless_asked(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("fcn-r"))
    assert code == 0, out
    assert not of(events, "profile")


def test_host_loader_synthetic(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("fcn-r", data_loader="host", iterations=3))
    assert code == 0, out
    assert events[-1] == {**events[-1], "event": "done", "iterations": 3}


def test_host_loader_real_data_same_losses_as_device(tmp_path: Path) -> None:
    """Where the batch is made changes the timing, never the math: same order, same losses."""
    write_mnist(tmp_path, n=24)
    losses = {}
    for loader, workers in (("device", 0), ("host", 0), ("host", 2)):
        code, events, out = run_runner(tmp_path, spec(
            "fcn-r", data="real", data_dir=str(tmp_path), data_loader=loader,
            loader_workers=workers, shuffle=True, iterations=8, warmup=1))
        assert code == 0, (loader, workers, out)
        losses[(loader, workers)] = [e["loss"] for e in of(events, "iter")]
    first = losses[("device", 0)]
    assert len(first) == 9 and len(set(first)) > 1
    assert losses[("host", 0)] == first
    assert losses[("host", 2)] == first


def test_resnet50_at_input_size_32(tmp_path: Path) -> None:
    import torch_models

    code, events, out = run_runner(tmp_path, spec("resnet-50", mode="inference", batch_size=1,
                                                  input_size=32, iterations=2))
    assert code == 0, out
    model = of(events, "model")[0]
    # an inference run reports the forward pass: a third of the training figure
    assert model["flops_per_sample"] == torch_models.training_flops_per_sample(
        "resnet-50", input_size=32) / 3
    assert model["flops_per_sample"] < torch_models.training_flops_per_sample("resnet-50") / 120
