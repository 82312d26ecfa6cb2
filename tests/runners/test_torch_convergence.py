"""PyTorch convergence runs: epochs, evaluations on the test files, the plan event."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_profile, run_runner, spec, write_mnist, write_mnist_test

pytestmark = pytest.mark.slow


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def test_eval_every_n_iterations(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=20)
    write_mnist_test(tmp_path, n=12)
    code, events, out = run_runner(tmp_path, spec(
        "fcn-r", data="real", data_dir=str(tmp_path), iterations=4, warmup=1, eval_every=2,
        batch_size=4, shuffle=True))
    assert code == 0, out
    names = [e["event"] for e in events]
    # After steps 2 and 4 (counted from 1, warm-up included) and after the last (5).
    assert names == ["hello", "model", "plan", "iter", "iter", "eval", "iter", "iter", "eval",
                     "iter", "eval", "done"]
    plan = of(events, "plan")[0]
    assert plan == {**plan, "iterations": 5, "n_train": 20, "n_test": 12, "epochs": None}
    evals = of(events, "eval")
    assert [e["index"] for e in evals] == [1, 3, 4]
    assert [e["epoch"] for e in evals] == [0.4, 0.8, 1.0]  # 5 steps of 4 in an epoch of 20
    for e in evals:
        assert e["samples"] == 12 and 0 <= e["accuracy"] <= 1 and e["perplexity"] is None
        assert math.isfinite(e["loss"]) and e["eval_s"] > 0
    # train_s grows by the steps only: never less than the reported step times so far.
    iters = of(events, "iter")
    for e in evals:
        steps = sum(i["seconds"] for i in iters[:e["index"] + 1])
        assert steps <= e["train_s"] < steps + 1.0
    assert events[-1]["iterations"] == 4


def test_eval_without_the_test_files_is_unsupported(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=20)
    code, events, _ = run_runner(tmp_path, spec(
        "fcn-r", data="real", data_dir=str(tmp_path), iterations=2, eval_every=1))
    assert code == 3 and events[-1]["kind"] == "unsupported"
    assert "t10k-images-idx3-ubyte" in str(events[-1]["message"])
    assert not of(events, "iter")


def test_lstm_eval_reports_perplexity(tmp_path: Path, synth_data: Any) -> None:
    import datasets

    n_test = datasets.real_split("lstm", str(synth_data("ptb")))[3][2]
    code, events, out = run_runner(tmp_path, spec(
        "lstm", data="real", data_dir=str(synth_data("ptb")), iterations=2, warmup=0,
        eval_every=2, batch_size=32), timeout=300)
    assert code == 0, out
    (ev,) = of(events, "eval")
    assert ev["accuracy"] is None and ev["samples"] == n_test > 100
    assert ev["perplexity"] == pytest.approx(math.exp(ev["loss"]), rel=1e-9)
    # Two steps from a uniform start over the 10000-word vocabulary: near 10000, finite.
    assert 100 < ev["perplexity"] < 20000


def test_epochs_run_through_dltop_run(tmp_path: Path, synth_data: Any, profile_text: Any,
                                      ) -> None:
    """Stored today: iterations and status; the new events pass the engine's checks."""
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({
        "frameworks": ["torch"], "models": ["fcn-r"], "batch_sizes": [500],
        "devices": ["cpu:1"], "warmup": 1, "epochs": 1, "data": "real",
        "data_dir": str(synth_data("mnist")), "optimizer": "adam", "lr": 0.001,
        "data_loader": "host", "profile": True, "timeout_s": 600}))
    res = run_profile(prof, 900)
    assert res.code == 0, res.stderr
    # Until the engine reads the plan event (helper spine's collector), it expects the
    # default 50 iterations and calls the run short; after that merge only "ok" remains.
    assert res.run["status"] == "ok" or "short: 11 of 50" in str(res.run["error_message"]), \
        res.run
    assert len(res.seconds) == 6000 // 500 and res.warmup.count(True) == 1
    assert res.spec["epochs"] == 1 and res.spec["data_loader"] == "host"


def test_two_gloo_ranks_evaluate_the_whole_test_set_once(tmp_path: Path) -> None:
    write_mnist(tmp_path, n=16)
    write_mnist_test(tmp_path, n=13)  # 4 batches of 4: rank 0 takes 2, rank 1 takes 2
    code, events, out = run_runner(tmp_path, spec(
        "fcn-r", device="cpus:2", data="real", data_dir=str(tmp_path), iterations=2,
        warmup=0, eval_every=2, batch_size=8), timeout=300)
    assert code == 0, out
    assert events[0]["world_size"] == 2
    (ev,) = of(events, "eval")
    assert ev["samples"] == 13  # the ranks' sums all-reduced: each sample counted once
    assert of(events, "plan")[0]["n_train"] == 16
    assert [e["samples"] for e in of(events, "iter")] == [8, 8]


def test_two_gloo_ranks_inference(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec("fcn-r", device="cpus:2", mode="inference",
                                                  batch_size=2), timeout=300)
    assert code == 0, out
    assert all(e["loss"] is None for e in of(events, "iter")) and events[-1]["iterations"] == 2


@pytest.mark.parametrize(("loader", "workers"), [("device", 0), ("host", 1)])
def test_lenet_learns_the_generated_mnist_in_two_epochs(tmp_path: Path, synth_data: Any,
                                                        loader: str, workers: int) -> None:
    code, events, out = run_runner(tmp_path, spec(
        "lenet", data="real", data_dir=str(synth_data("mnist")), epochs=2, eval_every="epoch",
        batch_size=64, optimizer="adam", lr=0.001, warmup=2, shuffle=True, data_loader=loader,
        loader_workers=workers), timeout=300)
    assert code == 0, out
    plan = of(events, "plan")[0]
    assert plan == {**plan, "iterations": 2 * (6000 // 64), "steps_per_epoch": 6000 // 64,
                    "epochs": 2, "n_train": 6000, "n_test": 1000}
    iters = of(events, "iter")
    assert len(iters) == 186 and [e["warmup"] for e in iters].count(True) == 2
    evals = of(events, "eval")
    assert [(e["index"], e["epoch"], e["samples"]) for e in evals] == [(92, 1.0, 1000),
                                                                     (185, 2.0, 1000)]
    assert evals[-1]["accuracy"] > 0.8  # chance is 0.1
    assert evals[-1]["loss"] < 1.0
    assert all(e["eval_s"] > 0 for e in evals)
    for e in evals:  # training time counts every step before the evaluation
        assert e["train_s"] >= sum(i["seconds"] for i in iters[:e["index"] + 1])
    assert evals[1]["train_s"] > evals[0]["train_s"]
    assert events[-1] == {**events[-1], "event": "done", "iterations": 184}
