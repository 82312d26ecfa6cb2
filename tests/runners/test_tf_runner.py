"""The TensorFlow runner as a real child process speaking protocol v1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import LazyModule, run_runner, spec, write_cifar_python, write_mnist

tf = LazyModule("tensorflow")

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

SCRIPT = "tf_runner.py"


def tf_spec(model: str = "fcn-r", device: str = "cpu:1", **kw: Any) -> dict[str, Any]:
    return spec(model, device, framework="tensorflow", **kw)


def kinds(events: list[dict[str, Any]]) -> list[object]:
    return [e["event"] for e in events]


def unsupported(events: list[dict[str, Any]]) -> str:
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "unsupported", events
    return str(events[-1]["message"])


@pytest.mark.parametrize("model", ["fcn-r", "alexnet-r", "resnet-56", "lstm"])
def test_synthetic_run_reports_every_iteration(tmp_path: Path, model: str) -> None:
    code, events, out = run_runner(tmp_path, tf_spec(model, iterations=2, warmup=1),
                                   script=SCRIPT)
    assert code == 0, out
    assert kinds(events) == ["hello", "model", "plan", "iter", "iter", "iter", "done"]
    hello = events[0]
    assert hello["framework"] == "tensorflow" and hello["threads"] == 1
    assert hello["framework_version"] == tf.__version__
    assert hello["intra_op_threads"] == 1 and hello["inter_op_threads"] == 1
    assert hello["xla"] is False and hello["device"] == "cpu"
    assert [e["warmup"] for e in events if e["event"] == "iter"] == [True, False, False]
    assert all(e["seconds"] > 0 and e["samples"] == 4 for e in events if e["event"] == "iter")
    assert all(isinstance(e["loss"], float) for e in events if e["event"] == "iter")
    assert events[-1]["iterations"] == 2
    assert "[dltop] run 1: tensorflow" in out


def test_param_count_matches_models_md(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, tf_spec("alexnet-r", iterations=1, warmup=0),
                                   script=SCRIPT)
    assert code == 0, out
    assert events[1]["param_count"] == 85_098 and events[1]["flops_per_sample"] > 0


def test_diverged(tmp_path: Path) -> None:
    code, events, _ = run_runner(tmp_path, tf_spec(iterations=4, options={"inject": "nan"}),
                                 script=SCRIPT)
    assert code == 3
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "diverged"
    assert [e["index"] for e in events if e["event"] == "iter"] == [0, 1, 2]


def test_injected_oom(tmp_path: Path) -> None:
    code, events, _ = run_runner(tmp_path, tf_spec(options={"inject": "oom"}), script=SCRIPT)
    assert code == 3 and events[-1]["kind"] == "oom"


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_gpu_only_precisions_are_unsupported_on_cpu(tmp_path: Path, precision: str) -> None:
    code, events, _ = run_runner(tmp_path, tf_spec(precision=precision), script=SCRIPT)
    assert code == 3
    assert f"precision {precision} needs a GPU" in unsupported(events)


def test_bf16_mixed_precision_runs_on_cpu(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, tf_spec("lstm", precision="bf16"), script=SCRIPT)
    assert code == 0, out
    assert events[0]["precision_policy"] == "mixed_bfloat16"
    assert events[-1]["event"] == "done"


def test_xla_option_runs(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, tf_spec("alexnet-r", options={"xla": True}),
                                   script=SCRIPT)
    assert code == 0, out
    assert events[0]["xla"] is True and events[-1]["event"] == "done"


def test_gpu_without_a_gpu_is_unsupported(tmp_path: Path) -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("checks the no-GPU path; this host has a GPU TensorFlow can use")
    code, events, _ = run_runner(tmp_path, tf_spec(device="gpu:1"), script=SCRIPT)
    assert code == 3
    assert "sees no GPU" in unsupported(events)


def test_real_mnist_cifar_and_ptb(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=10)
    code, events, out = run_runner(tmp_path, tf_spec("fcn-r", data="real",
                                                     data_dir=str(tmp_path)), script=SCRIPT)
    assert code == 0, out
    write_cifar_python(tmp_path, n=8)  # one CIFAR model: the loader is the same for all
    code, events, out = run_runner(tmp_path, tf_spec("alexnet-r", data="real",
                                                     data_dir=str(tmp_path)), script=SCRIPT)
    assert code == 0, out
    (tmp_path / "ptb.train.txt").write_text(" the cat sat on the mat \n" * 200)
    code, events, out = run_runner(tmp_path, tf_spec("lstm", data="real",
                                                     data_dir=str(tmp_path)), script=SCRIPT)
    assert code == 0, out
    code, events, _ = run_runner(tmp_path, tf_spec("alexnet-s", data="real",
                                                   data_dir=str(tmp_path)), script=SCRIPT)
    assert code == 3
    assert "no real data set" in unsupported(events)


def test_real_data_smaller_than_the_batch_crashes_clearly(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=2)
    code, events, _ = run_runner(tmp_path, tf_spec("fcn-r", data="real",
                                                   data_dir=str(tmp_path)), script=SCRIPT)
    assert code == 3 and events[-1]["kind"] == "crash"
    assert "fewer than the batch 4" in str(events[-1]["message"])
