"""Parity: every framework x every model runs through dltop itself and reports the same size.

One campaign per framework (PyTorch, TensorFlow, CNTK) at batch 2, one measured
iteration each, through the real engine, supervisor and runners: the five small models,
ResNet-50 at ``input_size`` 32 and ResNet-56 at 64. Every run must end ``ok``, and the
parameter count and FLOPs each runner reports must equal docs/models.md's count and the
reference FLOPs (``torch_models.training_flops_per_sample``, at an ``input_size`` that
size's), so every framework equals every other. The four ImageNet-sized models (FCN-S,
AlexNet-S, VGG16, ResNet-50 at 224) are counted in each framework's own process
(test_torch_models, test_tf_models, test_cntk_runner's one-process count, JAX below; JAX's
FCN-S, AlexNet-S and VGG16 also train through dltop run in test_jax_runner): a training
step of each through the engine in three frameworks cost the suite about three minutes
for the same numbers. JAX's models are also compared with torch's
in process, without TensorFlow or CNTK: sizes and FLOPs of every model, and the logits
and BN statistics of a training-mode forward pass with torch's weights.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import LazyModule
from .test_cntk_runner import COUNTS

jax = LazyModule("jax")
jnp = LazyModule("jax.numpy")
torch = LazyModule("torch")
jax_models = LazyModule("dltop.runners.child.jax_models")
torch_models = LazyModule("dltop.runners.child.torch_models")

pytestmark = pytest.mark.jax  # every test builds JAX models

# JAX's engine runs are test_jax_runner.py's (every model, the same size and FLOPs
# asserted): one engine run per model is enough.
PROFILE = """
name = "parity-{fw}"
[defaults]
frameworks = ["{fw}"]
batch_sizes = [2]
devices = ["cpu:1"]
iterations = 1
warmup = 0
timeout_s = 600
[[matrix]]
models = ["fcn-r", "alexnet-r", "resnet-56", "lstm", "lenet"]
[[matrix]]
models = ["resnet-56"]
input_size = 64
"""
SIZES = {"resnet-50": 32, "resnet-56": 64}
ENGINE_SIZES = {"resnet-56": 64}
"""The sized run through the engine: that ``input_size`` reaches each runner needs one;
ResNet-50 at 32 px is counted in each framework's own process (test_tf_models,
test_cntk_runner, test_torch_modes; JAX below), a TensorFlow process less here."""
SMALL = ["fcn-r", "alexnet-r", "resnet-56", "lstm", "lenet"]
BIG = {"fcn-s", "alexnet-s", "resnet-50", "vgg16"}


# One engine run per framework (one xdist worker each under `make test`: together they
# were the suite's slowest test, 147 s); each equals docs/models.md's parameter counts and
# the reference FLOPs, so all equal each other.
@pytest.mark.slow
@pytest.mark.timeout(900)  # 6 runs: past pytest's 300 s on a loaded machine
@pytest.mark.parametrize("fw", [
    "torch",
    pytest.param("tensorflow", marks=pytest.mark.tensorflow),
    pytest.param("cntk", marks=pytest.mark.cntk),
])
def test_every_framework_runs_every_model_with_equal_size(tmp_path: Path, fw: str) -> None:
    assert set(SMALL) | BIG == set(COUNTS) and not set(SMALL) & BIG  # every model, once
    prof = tmp_path / "parity.toml"
    prof.write_text(PROFILE.format(fw=fw))
    db = tmp_path / "p.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                          "--headless", "--no-telemetry"], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    conn = sqlite3.connect(db)
    rows = conn.execute("select j.model, s.spec_json, r.status, r.param_count, "
                        "r.flops_per_sample from runs r join jobs j on j.id = r.job_id "
                        "join job_specs s on s.job_id = j.id").fetchall()
    conn.close()
    sized = [(m, st, p, f, json.loads(spec).get("input_size")) for m, spec, st, p, f in rows]
    assert sorted((m, size or 0, st) for m, st, _, _, size in sized) == sorted(
        [(m, 0, "ok") for m in SMALL] + [(m, size, "ok") for m, size in ENGINE_SIZES.items()])
    for model, _, params, flops, size in sized:
        assert params == COUNTS[model], (model, size)
        assert round(flops) == round(
            torch_models.training_flops_per_sample(model, input_size=size)), (model, size)


# Shapes only in JAX; torch builds the model (a second or two for VGG16 and FCN-S).
@pytest.mark.parametrize(("model", "size"), [(m, None) for m in COUNTS] + list(SIZES.items()))
def test_jax_models_equal_torch_in_size_and_flops(model: str, size: int | None) -> None:
    abstract = jax_models.abstract_model(model, size)  # shapes only: nothing allocated
    assert jax_models.param_count(abstract.params) == COUNTS[model]
    assert jax_models.param_count(abstract.params) == torch_models.param_count(
        torch_models.build(model, size))
    assert jax_models.training_flops_per_sample(model, size) == (
        torch_models.training_flops_per_sample(model, input_size=size))


def _from_torch(model: str, net: Any) -> tuple[Any, Any]:
    """torch's weights (copies) in jax_models' pytrees: OIHW -> HWIO, (out, in) -> (in, out)."""
    sd = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    def dense(prefix: str) -> dict[str, Any]:
        return {"w": sd[prefix + ".weight"].T, "b": sd[prefix + ".bias"]}

    def conv_bn(conv: str, bn: str) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({"conv": {"w": sd[conv + ".weight"].transpose(2, 3, 1, 0)},
                 "bn": {"scale": sd[bn + ".weight"], "shift": sd[bn + ".bias"]}},
                {"mean": sd[bn + ".running_mean"], "var": sd[bn + ".running_var"]})

    if model == "lstm":
        layers = [{"w_ih": sd[f"lstm.weight_ih_l{i}"].T, "w_hh": sd[f"lstm.weight_hh_l{i}"].T,
                   "b_ih": sd[f"lstm.bias_ih_l{i}"], "b_hh": sd[f"lstm.bias_hh_l{i}"]}
                  for i in (0, 1)]
        return {"embed": {"table": sd["embed.weight"]}, "lstm": layers, "out": dense("out")}, {}
    if model == "resnet-56":
        blocks = [(conv_bn(f"blocks.{i}.conv1", f"blocks.{i}.bn1"),
                   conv_bn(f"blocks.{i}.conv2", f"blocks.{i}.bn2")) for i in range(27)]
        stem_p, stem_s = conv_bn("conv", "bn")
        return ({"stem": stem_p, "blocks": [{"a": a[0], "b": b[0]} for a, b in blocks],
                 "fc": dense("fc")},
                {"stem": stem_s, "blocks": [{"a": a[1], "b": b[1]} for a, b in blocks]})
    if model == "resnet-50":
        names = {"a": "1", "b": "2", "c": "3"}
        pairs = []
        for i in range(16):
            block = {k: conv_bn(f"blocks.{i}.conv{n}", f"blocks.{i}.bn{n}")
                     for k, n in names.items()}
            if f"blocks.{i}.down.0.weight" in sd:
                block["down"] = conv_bn(f"blocks.{i}.down.0", f"blocks.{i}.down.1")
            pairs.append(block)
        stem_p, stem_s = conv_bn("stem.0", "stem.1")
        return ({"stem": stem_p, "blocks": [{k: v[0] for k, v in b.items()} for b in pairs],
                 "fc": dense("fc")},
                {"stem": stem_s, "blocks": [{k: v[1] for k, v in b.items()} for b in pairs]})
    assert model == "alexnet-r"  # the same layer indexes: convs 0, 3, 6, the Linear 10
    params: list[dict[str, Any]] = [{} for _ in range(11)]
    for i in (0, 3, 6):
        params[i] = {"w": sd[f"{i}.weight"].transpose(2, 3, 1, 0), "b": sd[f"{i}.bias"]}
    # torch flattens (C, H, W), jax_models (H, W, C): the same weights, reordered.
    w = sd["10.weight"].reshape(10, 64, 3, 3).transpose(2, 3, 1, 0).reshape(576, 10)
    params[10] = {"w": w, "b": sd["10.bias"]}
    return params, {}


# ResNet-50 at 64: at 32 its last stage is 1x1, so BN normalises 3 values per channel and
# rounding differences grow to 1e-2 in training mode (eval mode agrees to 1e-7 there too).
@pytest.mark.parametrize(("model", "size"), [("alexnet-r", None), ("resnet-56", 8),
                                             pytest.param("resnet-50", 64, marks=pytest.mark.slow),
                                             ("lstm", None)])
def test_jax_models_compute_what_torch_models_compute(model: str, size: int | None) -> None:
    torch.manual_seed(0)
    net = torch_models.build(model, size)
    params, state = _from_torch(model, net)
    abstract = jax_models.abstract_model(model, size)
    assert jax_models.param_count(params) == jax_models.param_count(abstract.params)
    x, _ = torch_models.synthetic_batch(model, 3, torch.device("cpu"), input_size=size)
    want = net.train()(x)  # training mode: BN on batch statistics, running ones updated
    jax_x = jnp.asarray(x.numpy() if model == "lstm" else x.permute(0, 2, 3, 1).numpy())
    got, new_state = jax_models.build(model, 0, size).apply(params, state, jax_x, True)
    np.testing.assert_allclose(np.asarray(got), want.detach().numpy(), rtol=1e-3, atol=1e-4)
    if state:
        _, torch_state = _from_torch(model, net)
        for a, b in zip(jax.tree_util.tree_leaves(new_state),
                        jax.tree_util.tree_leaves(torch_state), strict=True):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)
