"""The JAX runner: its optimizers against PyTorch's, the data-parallel mesh, the child
process speaking protocol v1, every model through ``dltop run``, and preflight."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dltop.runners.registry import CHILD_DIR

from .conftest import (
    LazyModule,
    run_profile,
    run_runner,
    spec,
    write_mnist,
    write_mnist_test,
)
from .test_cntk_runner import COUNTS

torch_models = LazyModule("dltop.runners.child.torch_models")

pytestmark = pytest.mark.jax

SCRIPT = "jax_runner.py"
LR, WD, MOMENTUM = 0.1, 0.05, 0.9


def jax_spec(model: str = "fcn-r", device: str = "cpu:1", **kw: Any) -> dict[str, Any]:
    return spec(model, device, framework="jax", **kw)


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def unsupported(events: list[dict[str, Any]]) -> str:
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "unsupported", events
    return str(events[-1]["message"])


# optimizers ----------------------------------------------------------------------------
def steps_both(optimizer: str, steps: int = 3, **keys: Any) -> tuple[list[Any], list[Any]]:
    """The same weights and gradients through jax_train's and torch_optim's optimizer:
    each one's weights after every step."""
    import jax.numpy as jnp
    import jax_train
    import torch
    import torch_optim

    rng = np.random.RandomState(0)
    w0 = {"w": rng.standard_normal((3, 2)).astype(np.float32),
          "b": rng.standard_normal((2,)).astype(np.float32)}
    grads = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in w0.items()}
             for _ in range(steps)]
    s = {"optimizer": optimizer, "lr": LR, "momentum": 0.0, "weight_decay": WD, **keys}
    init, update = jax_train.optimizer(s)
    params = {k: jnp.asarray(v) for k, v in w0.items()}
    state = init(params)
    ours = []
    for g in grads:
        params, state = update({k: jnp.asarray(v) for k, v in g.items()}, state, params)
        ours.append({k: np.asarray(v) for k, v in params.items()})
    tp = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in w0.items()}
    opt = torch_optim.build(s, list(tp.values()))
    theirs = []
    for g in grads:
        for k, p in tp.items():
            p.grad = torch.tensor(g[k])
        opt.step()
        theirs.append({k: p.detach().numpy().copy() for k, p in tp.items()})
    return ours, theirs


@pytest.mark.parametrize(("optimizer", "keys"), [
    ("sgd", {}), ("sgd", {"momentum": MOMENTUM}), ("sgd", {"weight_decay": 0.0}),
    ("adam", {}), ("adamw", {}), ("adamw", {"weight_decay": 0.0})])
def test_optimizer_steps_equal_pytorch(optimizer: str, keys: dict[str, Any]) -> None:
    ours, theirs = steps_both(optimizer, **keys)
    for a, b in zip(ours, theirs, strict=True):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_adam_first_step_is_the_formula_with_coupled_l2() -> None:
    import jax.numpy as jnp
    import jax_train

    w, g = np.array([0.5, -2.0], np.float32), np.array([0.3, 0.01], np.float32)
    init, update = jax_train.optimizer({"optimizer": "adam", "lr": LR, "weight_decay": WD})
    p = {"w": jnp.asarray(w)}
    new, _ = update({"w": jnp.asarray(g)}, init(p), p)
    gl2 = g.astype(np.float64) + WD * w
    expect = w - LR * gl2 / (np.abs(gl2) + 1e-8)  # m_hat = g, v_hat = g**2 at t = 1
    np.testing.assert_allclose(np.asarray(new["w"]), expect, rtol=1e-6)
    # adamw decays the weights apart from the moments: lands elsewhere.
    init, update = jax_train.optimizer({"optimizer": "adamw", "lr": LR, "weight_decay": WD})
    neww, _ = update({"w": jnp.asarray(g)}, init(p), p)
    np.testing.assert_allclose(np.asarray(neww["w"]),
                               w - LR * WD * w - LR * g / (np.abs(g) + 1e-8), rtol=1e-6)


def test_fp16_loss_scaling_skips_an_overflowing_step_and_halves_the_scale() -> None:
    """GradScaler's rule (the fp16 path needs a GPU to run whole; its scaler runs anywhere)."""
    import jax
    import jax.numpy as jnp
    import jax_models
    import jax_train

    model = jax_models.Model({"w": jnp.ones((2,))}, {},
                             lambda p, s, x, train: (x * p["w"], s))
    init, update = jax_train.optimizer({"optimizer": "sgd", "lr": 0.5})
    step = jax.jit(jax_train.train_step(model, lambda logits, y: jnp.sum(logits * y), update,
                                        scaled=True))
    params, opt = model.params, (init(model.params), jax_train.scaler_init())
    x = jnp.ones((2,))
    # 1e35 x the scale 2**16 overflows float32: no update, the scale halves.
    params, _, opt, loss = step(params, {}, opt, x, jnp.full((2,), 1e35))
    np.testing.assert_array_equal(np.asarray(params["w"]), [1.0, 1.0])
    assert float(opt[1][0]) == 2.0 ** 15 and int(opt[1][1]) == 0 and float(loss) > 0
    # A finite step updates with the unscaled gradient (y) and counts towards growth.
    params, _, opt, _ = step(params, {}, opt, x, jnp.asarray([1.0, 2.0]))
    np.testing.assert_allclose(np.asarray(params["w"]), [0.5, 0.0])
    assert float(opt[1][0]) == 2.0 ** 15 and int(opt[1][1]) == 1


def test_unknown_optimizer_is_refused() -> None:
    import jax_train

    with pytest.raises(ValueError, match="rmsprop"):
        jax_train.optimizer({"optimizer": "rmsprop", "lr": 0.1})


# data parallel -------------------------------------------------------------------------
MESH_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import jax, numpy as np
import jax_data, jax_models, jax_train
assert len(jax.devices()) == 2, jax.devices()
spec = {"model": "lenet", "samples_per_iter": 8, "seed": 0, "optimizer": "sgd", "lr": 0.1,
        "momentum": 0.9}
out = {}
for n in (1, 2):
    place = jax_data.Placement(jax.devices()[:n])
    model = jax_models.build("lenet", jax.random.PRNGKey(0))
    init, update = jax_train.optimizer(spec)
    step = jax_train.train_step(model, lambda a, b: jax_models.loss("lenet", a, b), update)
    run = place.jit(step, 3, 2, 4, donate=(0, 1, 2))
    w, s = place.weights(model.params), place.weights(model.state)
    o = place.weights(init(model.params))
    x, y = jax_data.synthetic(spec, place, False).batch(0)
    if n == 2:
        assert sorted(sh.data.shape[0] for sh in x.addressable_shards) == [4, 4]
    for _ in range(2):
        w, s, o, loss = run(w, s, o, x, y)
    if n == 2:
        leaf = jax.tree_util.tree_leaves(w)[0]
        assert leaf.sharding.is_fully_replicated and len(leaf.sharding.device_set) == 2
    out[n] = (float(loss), [np.asarray(a) for a in jax.tree_util.tree_leaves(w)])
assert abs(out[1][0] - out[2][0]) < 1e-5, (out[1][0], out[2][0])
for a, b in zip(out[1][1], out[2][1]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
print("mesh ok")
"""


def test_two_device_mesh_splits_the_batch_and_matches_one_device(tmp_path: Path) -> None:
    """gpu:N's sharding, run on two forced host (CPU) devices: the same updates as one."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu"}
    res = subprocess.run([sys.executable, "-c", MESH_CHECK, str(CHILD_DIR)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "mesh ok" in res.stdout, res.stderr[-3000:]


# the child process ---------------------------------------------------------------------
def test_synthetic_run_reports_every_iteration_and_compile_time(tmp_path: Path) -> None:
    import jax

    code, events, out = run_runner(tmp_path, jax_spec("fcn-r"), script=SCRIPT)
    assert code == 0, out
    assert [e["event"] for e in events] == ["hello", "model", "plan", "iter", "iter", "iter",
                                            "done"]
    hello = events[0]
    assert hello["framework"] == "jax" and hello["framework_version"] == jax.__version__
    assert hello["threads"] == 1 and hello["device"] == "cpu" and hello["compile_s"] > 0
    assert "--xla_cpu_multi_thread_eigen=false" in hello["xla_flags"]
    assert events[1]["param_count"] == 14_205_962 and events[1]["flops_per_sample"] == 85_192_704
    iters = of(events, "iter")
    assert [e["warmup"] for e in iters] == [True, False, False]
    assert all(e["seconds"] > 0 and e["samples"] == 4 and isinstance(e["loss"], float)
               for e in iters)
    assert "step compiled in" in out


@pytest.mark.parametrize(("precision", "why"), [
    ("fp16", "precision fp16 needs a GPU"), ("tf32", "precision tf32 needs a GPU")])
def test_gpu_precisions_are_unsupported_on_cpu(tmp_path: Path, precision: str,
                                               why: str) -> None:
    code, events, _ = run_runner(tmp_path, jax_spec(precision=precision), script=SCRIPT)
    assert code == 3 and why in unsupported(events)


@pytest.mark.parametrize(("keys", "why"), [
    ({"device": "cpus:2"}, "cpus:2 (multi-process CPU data parallel) is not supported"),
    ({"op_profile": True}, "operator profile"),
    ({"device": "gpu:1"}, "gpu")])
def test_unsupported_setups_say_why(tmp_path: Path, keys: dict[str, Any], why: str) -> None:
    code, events, _ = run_runner(tmp_path, jax_spec(**keys), script=SCRIPT)
    assert code == 3 and why in unsupported(events)


def test_bf16_inference_and_injected_faults(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, jax_spec("lenet", precision="bf16",
                                                      optimizer="adamw", weight_decay=0.01),
                                   script=SCRIPT)
    assert code == 0, out
    assert events[0]["precision_compute"] == "bfloat16"
    assert all(math.isfinite(e["loss"]) for e in of(events, "iter"))
    code, events, out = run_runner(tmp_path, jax_spec("lenet", mode="inference",
                                                      device="cpu:2"), script=SCRIPT)
    assert code == 0, out
    assert events[0]["threads"] == 2 and events[1]["flops_per_sample"] == 2_499_120 / 3
    assert all(e["loss"] is None for e in of(events, "iter"))
    code, events, _ = run_runner(tmp_path, jax_spec(iterations=4, options={"inject": "nan"}),
                                 script=SCRIPT)
    assert code == 3 and events[-1]["kind"] == "diverged"
    assert [e["index"] for e in of(events, "iter")] == [0, 1, 2]
    code, events, _ = run_runner(tmp_path, jax_spec(options={"inject": "oom"}), script=SCRIPT)
    assert code == 3 and events[-1]["kind"] == "oom" and events[0]["event"] == "hello"


@pytest.mark.parametrize(("loader", "workers"), [("device", 0), ("host", 2)])
def test_real_data_evaluates_the_whole_test_set(tmp_path: Path, loader: str,
                                                workers: int) -> None:
    write_mnist(tmp_path, n=20)
    write_mnist_test(tmp_path, n=13)
    code, events, out = run_runner(tmp_path, jax_spec(
        "fcn-r", data="real", data_dir=str(tmp_path), iterations=4, warmup=1, eval_every=2,
        batch_size=4, shuffle=True, data_loader=loader, loader_workers=workers),
        script=SCRIPT)
    assert code == 0, out
    assert [e["event"] for e in events] == ["hello", "model", "plan", "iter", "iter", "eval",
                                            "iter", "iter", "eval", "iter", "eval", "done"]
    assert of(events, "plan")[0]["n_train"] == 20 and of(events, "plan")[0]["n_test"] == 13
    for e in of(events, "eval"):
        # 13 samples in 4 padded batches of 4: the padding is masked out.
        assert e["samples"] == 13 and 0 <= e["accuracy"] <= 1 and math.isfinite(e["loss"])


# every model through the engine --------------------------------------------------------
ENGINE_RUNS = {
    "fcn-r": {"batch_sizes": [4]}, "alexnet-r": {"batch_sizes": [4]},
    "resnet-56": {"batch_sizes": [2]}, "lstm": {"batch_sizes": [2]},
    "lenet": {"batch_sizes": [4]},
}
"""One model of each family through the engine (fully connected, convolutional, residual
with batch norm, recurrent, LeNet), small enough for a 2-core CPU. fcn-s, alexnet-s,
resnet-50 and vgg16 share their family's runner code and are checked in-process
(tests/runners/test_jax_models.py: parameters, FLOPs, forward; test_parity.py against
torch): their XLA compiles cost the suite ~2 minutes here."""


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("model", list(ENGINE_RUNS))
def test_every_model_runs_through_dltop_run(tmp_path: Path, profile_text: Any,
                                            model: str) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({
        "frameworks": ["jax"], "models": [model], "devices": ["cpu:1"], "iterations": 2,
        "warmup": 1, "timeout_s": 1200, **ENGINE_RUNS[model]}))
    res = run_profile(prof, 1500)
    assert res.code == 0, res.stderr
    assert res.run["status"] == "ok", (res.run["error_message"], res.run["log_tail"])
    assert len(res.seconds) == 3 and res.warmup == [True, False, False]
    # parity with the other frameworks, as stored from the run (test_parity.py's engine run
    # covers torch, tensorflow and cntk; JAX's share of it is here, model by model)
    size = ENGINE_RUNS[model].get("input_size")
    assert res.run["param_count"] == COUNTS[model]
    assert round(res.run["flops_per_sample"]) == round(
        torch_models.training_flops_per_sample(model, input_size=size))
    assert res.environment["framework"] == "jax"
    assert json.loads(res.environment["extra"])["compile_s"] > 0


# preflight -----------------------------------------------------------------------------
def test_a_python_without_jax_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", "import jax"], capture_output=True)
    assert probe.returncode != 0, f"{bare} has jax: this test needs a Python without it"
    prof = tmp_path / "p.toml"
    prof.write_text('[[matrix]]\nframeworks = ["jax"]\nmodels = ["fcn-r"]\n'
                    'batch_sizes = [8]\ndevices = ["cpu:1"]\n')
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db)],
                         capture_output=True, text=True,
                         env={**os.environ, "DLTOP_PYTHON_JAX": bare,
                              "DLTOP_CONFIG": str(tmp_path / "c.toml")})
    assert res.returncode == 2, res.stderr
    assert "jax is not installed in /usr/bin/python3" in res.stderr
    assert "pip install 'dltop[jax]'" in res.stderr and "Traceback" not in res.stderr
    assert not db.exists()


def test_doctor_says_how_to_install_jax_where_its_python_lacks_it(tmp_path: Path) -> None:
    # the installed JAX's line: tests/telemetry/test_devices_cli.py (one doctor for all)
    env = {**os.environ, "DLTOP_CONFIG": str(tmp_path / "c.toml")}
    bare = {**env, "DLTOP_PYTHON_JAX": "/usr/bin/python3"}
    res = subprocess.run([sys.executable, "-m", "dltop", "doctor"], capture_output=True,
                         text=True, env=bare, timeout=600)
    assert "[!!] jax:" in res.stdout and "fix: pip install 'dltop[jax]'" in res.stdout
