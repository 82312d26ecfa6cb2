"""Issue 17 in the CNTK runner: convergence with evals, inference, op profile, host loader.

Each test runs cntk_runner.py as a real child under CNTK's Python 3.6, like
test_cntk_runner.py, and asserts on the events it sends (the engine may not
store the new ones yet).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop import envsetup

from .test_cntk_runner import cntk_env, cntk_spec, kinds, run_cntk  # noqa: F401

# Both CNTK modules on one worker: the session's CNTK environment is then set up once,
# not once per worker and module (under `make test`'s --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.cntk, pytest.mark.xdist_group("cntk")]


def of(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def test_lenet_learns_generated_mnist_with_an_eval_per_epoch(
        cntk_env: envsetup.CntkEnv, tmp_path: Path,  # noqa: F811
        synth_data: Callable[[str], Path]) -> None:
    data = synth_data("mnist")
    job = cntk_spec("lenet", batch_size=32, data="real", data_dir=str(data), epochs=2,
                    eval_every="epoch", warmup=2, optimizer="adam", lr=0.002, shuffle=True)
    code, events, out = run_cntk(cntk_env, tmp_path, job, timeout=600)
    assert code == 0, out
    plan = of(events, "plan")[0]
    steps = plan["n_train"] // 32
    assert plan == {**plan, "iterations": 2 * steps, "steps_per_epoch": steps, "epochs": 2}
    assert kinds(events).index("plan") < kinds(events).index("iter")
    iters = of(events, "iter")
    assert len(iters) == 2 * steps and [e["warmup"] for e in iters[:3]] == [True, True, False]
    evals = of(events, "eval")
    assert [e["index"] for e in evals] == [steps - 1, 2 * steps - 1]
    assert [e["epoch"] for e in evals] == [1.0, 2.0]
    assert all(e["samples"] == plan["n_test"] and e["perplexity"] is None for e in evals)
    assert evals[-1]["accuracy"] > 0.5  # chance is 0.1
    # train_s runs from the first step's start and leaves the evaluations out: between
    # the two evals' steps, wall time = train time + the first eval's time.
    assert sum(e["seconds"] for e in iters) <= evals[-1]["train_s"]
    wall_s = (iters[-1]["t_mono_ns"] - iters[steps - 1]["t_mono_ns"]) / 1e9
    train_s = evals[1]["train_s"] - evals[0]["train_s"]
    assert wall_s - train_s == pytest.approx(evals[0]["eval_s"], abs=0.05)
    assert events[-1] == {**events[-1], "event": "done", "iterations": 2 * steps - 2}


def test_lstm_eval_reports_perplexity(cntk_env: envsetup.CntkEnv, tmp_path: Path,  # noqa: F811
                                      synth_data: Callable[[str], Path]) -> None:
    job = cntk_spec("lstm", batch_size=8, data="real", data_dir=str(synth_data("ptb")),
                    iterations=3, warmup=0, eval_every=2)
    code, events, out = run_cntk(cntk_env, tmp_path, job, timeout=600)
    assert code == 0, out
    evals = of(events, "eval")
    assert [e["index"] for e in evals] == [1, 2]
    assert all(e["accuracy"] is None and 1 < e["perplexity"] < 20000 for e in evals)


def test_eval_without_test_files_is_unsupported(cntk_env: envsetup.CntkEnv,  # noqa: F811
                                                tmp_path: Path,
                                                synth_data: Callable[[str], Path]) -> None:
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (tmp_path / name).symlink_to(synth_data("mnist") / name)
    job = cntk_spec("fcn-r", data="real", data_dir=str(tmp_path), epochs=1, eval_every="epoch")
    code, events, _ = run_cntk(cntk_env, tmp_path, job)
    assert code == 3 and events[-1]["kind"] == "unsupported"
    assert "t10k-images-idx3-ubyte" in events[-1]["message"]


def test_inference_batch_1_has_null_losses_and_a_profile(cntk_env: envsetup.CntkEnv,  # noqa: F811
                                                         tmp_path: Path) -> None:
    job = cntk_spec("lenet", batch_size=1, mode="inference", iterations=3, warmup=1,
                    op_profile=True)
    code, events, out = run_cntk(cntk_env, tmp_path, job)
    assert code == 0, out
    assert kinds(events) == ["hello", "model", "plan", "iter", "iter", "iter", "iter",
                             "profile", "done"]
    assert of(events, "plan")[0]["iterations"] == 4
    assert all(e["loss"] is None and e["samples"] == 1 for e in of(events, "iter"))
    ops = of(events, "profile")[0]["ops"]
    names = [op["name"] for op in ops]
    assert "Convolution (forward)" in names and not any("backward" in n for n in names)
    assert events[-1]["iterations"] == 3


def test_training_profile_has_forward_and_backward_ops(cntk_env: envsetup.CntkEnv,  # noqa: F811
                                                       tmp_path: Path) -> None:
    job = cntk_spec("lenet", iterations=2, warmup=0, op_profile=True)
    code, events, out = run_cntk(cntk_env, tmp_path, job)
    assert code == 0, out
    assert len(of(events, "iter")) == 2  # the 5 profiled steps send no iter
    prof = of(events, "profile")[0]
    assert prof["steps"] == 5 and prof["device"] == "cpu" and prof["step_ms"] > 0
    by_name = {op["name"]: op for op in prof["ops"]}
    conv = by_name["Convolution (backward)"]
    assert conv["calls"] == 2 * 5 and conv["self_cpu_ms"] > 0  # two conv layers
    assert conv["self_device_ms"] is None and conv["total_ms"] == conv["self_cpu_ms"]
    selfs = [op["self_cpu_ms"] for op in prof["ops"]]
    assert selfs == sorted(selfs, reverse=True)


def test_host_loader_workers_keep_the_batch_order(cntk_env: envsetup.CntkEnv,  # noqa: F811
                                                  tmp_path: Path,
                                                  synth_data: Callable[[str], Path]) -> None:
    losses = []
    for extra in ({}, {"data_loader": "host", "loader_workers": 2}):
        job = cntk_spec("lenet", batch_size=16, data="real", data_dir=str(synth_data("mnist")),
                        iterations=6, warmup=0, shuffle=True, **extra)
        code, events, out = run_cntk(cntk_env, tmp_path, job)
        assert code == 0, out
        losses.append([e["loss"] for e in of(events, "iter")])
    assert len(losses[0]) == 6 and losses[0] == pytest.approx(losses[1], rel=1e-5)


def test_host_loader_synthetic(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:  # noqa: F811
    for model in ("fcn-r", "lstm"):
        job = cntk_spec(model, data_loader="host", iterations=2, warmup=0)
        code, events, out = run_cntk(cntk_env, tmp_path, job)
        assert code == 0, out
        assert all(isinstance(e["loss"], float) for e in of(events, "iter"))
