"""The TensorFlow runner's issue-17 modes as real child processes: convergence runs with
evaluations, inference, the host data loader and the op profile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_runner, write_mnist
from .test_tf_runner import SCRIPT, kinds, tf_spec, unsupported

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]


SynthData = Callable[[str], Path]


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def real_lenet(data_dir: Path, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(data="real", data_dir=str(data_dir), batch_size=32, warmup=2,
                                optimizer="adam", lr=0.001, shuffle=True)
    return tf_spec("lenet", **{**base, **kw})


def test_convergence_on_generated_mnist(tmp_path: Path, synth_data: SynthData) -> None:
    code, events, out = run_runner(
        tmp_path, real_lenet(synth_data("mnist"), epochs=2, eval_every="epoch"),
        script=SCRIPT, timeout=300)
    assert code == 0, out
    plan = of(events, "plan")[0]
    spe = 6000 // 32
    assert plan == {**plan, "iterations": 2 * spe, "steps_per_epoch": spe, "epochs": 2,
                    "n_train": 6000, "n_test": 1000}
    assert kinds(events).index("plan") == 2  # after model, before the first iter
    iters = of(events, "iter")
    assert [e["index"] for e in iters] == list(range(2 * spe))
    assert [e["warmup"] for e in iters[:3]] == [True, True, False]
    evals = of(events, "eval")
    assert [(e["index"], e["epoch"]) for e in evals] == [(spe - 1, 1.0), (2 * spe - 1, 2.0)]
    assert all(e["samples"] == 1000 and e["perplexity"] is None and e["eval_s"] > 0
               for e in evals)
    # Chance is 0.1: the generated digits are learnt within the first epoch.
    assert evals[0]["accuracy"] > 0.6 and evals[-1]["accuracy"] > 0.8, evals
    assert evals[-1]["loss"] < evals[0]["loss"] or evals[-1]["accuracy"] > 0.95, evals
    # train_s counts the steps, not the evaluations in between.
    steps_s = sum(e["seconds"] for e in iters)
    assert steps_s <= evals[-1]["train_s"] < steps_s + evals[0]["eval_s"]
    assert events[-1] == {**events[-1], "event": "done", "iterations": 2 * spe - 2}


def test_host_loader_with_workers_matches_the_device_loader(tmp_path: Path,
                                                            synth_data: SynthData) -> None:
    """Same seed, same order: the host pipeline feeds the very batches the device one does."""
    runs = {}
    for loader, workers in (("device", 0), ("host", 2)):
        code, events, out = run_runner(
            tmp_path, real_lenet(synth_data("mnist"), iterations=5, eval_every=3,
                                 data_loader=loader, loader_workers=workers,
                                 op_profile=loader == "host"), script=SCRIPT, timeout=300)
        assert code == 0, out
        runs[loader] = events
    host = runs["host"]
    assert [e["index"] for e in of(host, "eval")] == [2, 5, 6]  # every 3 steps and the last
    assert [e["loss"] for e in of(host, "iter")] == [e["loss"] for e in of(runs["device"],
                                                                           "iter")]
    assert [e["accuracy"] for e in of(host, "eval")] == [
        e["accuracy"] for e in of(runs["device"], "eval")]
    # The profile comes after the measured steps and is none of them.
    assert kinds(host)[-2:] == ["profile", "done"] and len(of(host, "iter")) == 7
    profile = of(host, "profile")[0]
    assert profile["steps"] == 5 and profile["device"] == "cpu" and profile["step_ms"] > 0
    names = [op["name"] for op in profile["ops"]]
    # Base op names on every CPU: AVX-512 machines run _MklNativeConv2DBackpropFilter...
    assert "Conv2DBackpropFilter" in names and "MaxPool" in names, names
    assert not [n for n in names if n.startswith(("_Mkl", "_Fused"))], names
    assert all(op["self_device_ms"] is None and op["calls"] >= 1
               and 0 <= op["self_cpu_ms"] <= op["total_ms"] for op in profile["ops"])
    own = [op["self_cpu_ms"] for op in profile["ops"]]
    assert own == sorted(own, reverse=True)
    # Self times are parts of the profiled steps' wall time, not more.
    assert sum(own) <= profile["steps"] * profile["step_ms"] * 1.05


def test_inference_batch_1_has_no_loss(tmp_path: Path) -> None:
    code, events, out = run_runner(
        tmp_path, tf_spec("lenet", mode="inference", batch_size=1, iterations=3, warmup=1,
                          data_loader="host", op_profile=True), script=SCRIPT)
    assert code == 0, out
    assert of(events, "plan")[0]["iterations"] == 4
    iters = of(events, "iter")
    assert [(e["loss"], e["samples"]) for e in iters] == [(None, 1)] * 4
    assert not of(events, "eval") and events[-1]["iterations"] == 3
    names = [op["name"] for op in of(events, "profile")[0]["ops"]]
    # Forward only: convolutions, no gradient kernels.
    assert any("Conv2D" in n for n in names), names
    assert not any("Backprop" in n or n.endswith("Grad") for n in names), names


def test_eval_without_the_test_files_is_unsupported(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=64)
    code, events, _ = run_runner(tmp_path, real_lenet(tmp_path, iterations=2, eval_every=1),
                                 script=SCRIPT)
    assert code == 3
    assert "t10k-images-idx3-ubyte" in unsupported(events)
