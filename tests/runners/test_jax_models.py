"""JAX models: docs/models.md's sizes and FLOPs, forward shapes, BN state, SGD, bf16, jit.

Large models (FCN-S, AlexNet-S, VGG16, ResNet-50 at 224) are checked by shape with
``jax.eval_shape``; a real forward runs for the others (ResNet-50 at ``input_size`` 32).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from dltop import catalog
from dltop.runners.child import model_catalog

from .conftest import LazyModule

jax = LazyModule("jax")
jnp = LazyModule("jax.numpy")
jax_layers = LazyModule("dltop.runners.child.jax_layers")
jm = LazyModule("dltop.runners.child.jax_models")

# Every test needs JAX, and jit compiles take seconds: `make test-fast` leaves them out.
pytestmark = pytest.mark.jax

COUNTS = {"fcn-s": 122_194_048, "fcn-r": 14_205_962, "alexnet-s": 61_100_840,
          "alexnet-r": 85_098, "resnet-50": 25_557_032, "resnet-56": 853_018,
          "lstm": 6_182_672, "lenet": 61_706, "vgg16": 138_357_544}
"""docs/models.md's parameter counts."""
FLOPS = {"fcn-s": 732_954_624, "fcn-r": 85_192_704, "alexnet-s": 4_285_130_880,
         "alexnet-r": 64_392_960, "resnet-50": 24_535_105_536, "resnet-56": 752_914_176,
         "lstm": 692_846_592, "lenet": 2_499_120, "vgg16": 92_821_585_920}
"""docs/models.md's training FLOPs per sample (the torch and TF runners report the same)."""
SIZED_FLOPS = {("resnet-50", 32): 512_753_664, ("resnet-56", 64): 3_011_645_184}
REAL_FORWARD = [("fcn-r", None), ("alexnet-r", None), ("lenet", None), ("resnet-56", None),
                pytest.param("resnet-50", 32, marks=pytest.mark.slow),  # 5-12 s eager
                ("lstm", None)]


def key() -> Any:
    """The tests' PRNG key (made when a test runs: collection does not import JAX)."""
    return jax.random.key(0)


def out_shape(name: str, batch: int) -> tuple[int, ...]:
    if name == "lstm":
        return (batch, model_catalog.SEQ_LEN, model_catalog.VOCAB)
    return (batch, model_catalog.NUM_CLASSES[name])


def test_every_catalog_model_is_built() -> None:
    # The transformers are jax_lm's (tests/runners/test_jax_lm.py counts them).
    cnns = set(catalog.MODELS) - set(catalog.TRANSFORMER_MODELS)
    assert set(jm.NAMES) == cnns == set(COUNTS) == set(FLOPS)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_parameter_count_flops_and_output_shape(name: str) -> None:
    model = jm.abstract_model(name)  # shapes only: FCN-S and VGG16 allocate nothing
    assert jm.param_count(model.params) == COUNTS[name]
    assert jm.training_flops_per_sample(name) == FLOPS[name]
    x = jax.ShapeDtypeStruct((2, *jm.input_shape(name)),
                             jnp.int32 if name == "lstm" else jnp.float32)
    out, state = jax.eval_shape(lambda p, s, x: model.apply(p, s, x, True),
                                model.params, model.state, x)
    assert out.shape == out_shape(name, 2)
    assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(model.state)


@pytest.mark.parametrize(("name", "size"), sorted(SIZED_FLOPS))
def test_input_size_keeps_parameters_and_scales_flops(name: str, size: int) -> None:
    model = jm.abstract_model(name, size)
    assert jm.param_count(model.params) == COUNTS[name]
    assert jm.training_flops_per_sample(name, size) == SIZED_FLOPS[(name, size)]
    assert jm.input_shape(name, size) == (size, size, 3)


def test_images_are_nhwc_and_bad_names_or_sizes_refused() -> None:
    assert jm.input_shape("alexnet-r") == (32, 32, 3)
    assert jm.input_shape("fcn-s") == (26752,)
    assert jm.input_shape("lstm") == (model_catalog.SEQ_LEN,)
    with pytest.raises(KeyError, match="unknown model"):
        jm.build("vgg", key())
    with pytest.raises(ValueError, match="input_size"):
        jm.build("fcn-r", key(), input_size=32)
    with pytest.raises(ValueError, match="at least"):
        jm.build("resnet-56", key(), input_size=4)


@pytest.mark.parametrize(("name", "size"), REAL_FORWARD)
def test_forward_is_finite(name: str, size: int | None) -> None:
    # Eager: on a CPU, compiling each model would take longer than running it.
    model = jm.build(name, key(), size)
    x, y = jm.synthetic_batch(name, 2, jax.random.key(1), size)
    out, _ = model.apply(model.params, model.state, x, True)
    assert out.shape == out_shape(name, 2) and out.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(out)))
    loss = jm.loss(name, out, y)
    assert loss.shape == () and math.isfinite(float(loss))


@pytest.mark.slow  # compiles ResNet-56 twice (train and eval); the SGD tests jit the others
def test_jit_with_static_train_flag_matches_eager() -> None:
    model = jm.build("resnet-56", key(), input_size=8)
    x, _ = jm.synthetic_batch("resnet-56", 2, jax.random.key(1), 8)
    jitted = jax.jit(model.apply, static_argnums=3)
    for train in (True, False):
        got = jitted(model.params, model.state, x, train)
        want = model.apply(model.params, model.state, x, train)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                        strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_loss_is_mean_cross_entropy_over_every_step() -> None:
    logits = jnp.zeros((2, 3, 4))
    labels = jnp.zeros((2, 3), jnp.int32)
    assert float(jm.loss("lstm", logits, labels)) == pytest.approx(math.log(4))
    logits = jnp.array([[10.0, 0.0], [0.0, 10.0]])
    assert float(jm.loss("fcn-r", logits, jnp.array([0, 0]))) == pytest.approx(5.0, abs=1e-3)


def test_resnet_train_updates_bn_state_and_eval_reads_it() -> None:
    model = jm.build("resnet-56", key(), input_size=8)
    x, _ = jm.synthetic_batch("resnet-56", 4, jax.random.key(1), 8)
    apply = model.apply
    _, trained = apply(model.params, model.state, x, True)
    stem = trained["stem"]
    batch_mean = np.asarray(jnp.mean(jax_layers.conv(model.params["stem"]["conv"], x, 1, 1),
                                     axis=(0, 1, 2)))
    # torch's momentum 0.1 from a zero running mean.
    np.testing.assert_allclose(np.asarray(stem["mean"]), 0.1 * batch_mean, rtol=1e-4, atol=1e-6)
    assert not np.allclose(np.asarray(stem["var"]), 1.0)
    _, kept = apply(model.params, trained, x, False)
    leaves = zip(jax.tree_util.tree_leaves(kept), jax.tree_util.tree_leaves(trained), strict=True)
    assert all(bool(jnp.array_equal(a, b)) for a, b in leaves)
    out_a, _ = apply(model.params, trained, x, False)
    out_b, _ = apply(model.params, trained, x[:1], False)  # eval: per sample, not per batch
    np.testing.assert_allclose(np.asarray(out_a[:1]), np.asarray(out_b), rtol=1e-4, atol=1e-5)


def test_resnet56_shortcut_a_and_resnet50_projections() -> None:
    r56 = jm.abstract_model("resnet-56")
    assert not any("down" in block for block in r56.params["blocks"])
    r50 = jm.abstract_model("resnet-50", 32)
    assert sum("down" in block for block in r50.params["blocks"]) == 4  # one per stage


def test_lstm_has_two_trained_bias_vectors_per_layer() -> None:
    model = jm.build("lstm", key())
    x, y = jm.synthetic_batch("lstm", 2, jax.random.key(1))

    def f(params: object) -> jax.Array:
        return jm.loss("lstm", model.apply(params, model.state, x, True)[0], y)

    grads = jax.grad(f)(model.params)
    for layer in grads["lstm"]:
        for name in ("b_ih", "b_hh"):
            assert layer[name].shape == (1024,) and float(jnp.sum(jnp.abs(layer[name]))) > 0


def test_initialisation_follows_torch() -> None:
    params = jm.build("fcn-r", key()).params
    w = np.asarray(params[0]["w"])
    bound = 1 / math.sqrt(784)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound  # uniform's standard deviation
    table = np.asarray(jm.build("lstm", key()).params["embed"]["table"])
    assert abs(table.mean()) < 0.01 and abs(table.std() - 1) < 0.01  # N(0, 1)
    same, other = jm.build("fcn-r", key()).params, jm.build("fcn-r", jax.random.key(1)).params
    assert np.array_equal(np.asarray(same[0]["w"]), w)
    assert not np.array_equal(np.asarray(other[0]["w"]), w)


@pytest.mark.parametrize("name", ["fcn-r", "lenet"])
def test_sgd_steps_reduce_the_loss_on_a_fixed_batch(name: str) -> None:
    model = jm.build(name, key())
    x, y = jm.synthetic_batch(name, 16, jax.random.key(1))

    @jax.jit
    def step(params: object) -> tuple[object, jax.Array]:
        def f(p: object) -> jax.Array:
            return jm.loss(name, model.apply(p, model.state, x, True)[0], y)
        value, grads = jax.value_and_grad(f)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value

    params, first = step(model.params)
    for _ in range(9):  # random labels: LeNet's loss falls from 2.30 to 2.10
        params, last = step(params)
    assert float(last) < 0.95 * float(first)


def test_bf16_computes_in_bf16_and_keeps_fp32_parameters() -> None:
    model = jm.build("lenet", key(), dtype=jnp.bfloat16)
    x, y = jm.synthetic_batch("lenet", 2, jax.random.key(1))
    assert all(p.dtype == jnp.float32 for p in jax.tree_util.tree_leaves(model.params))
    out, _ = model.apply(model.params, model.state, x, True)
    assert out.dtype == jnp.bfloat16
    grads = jax.jit(jax.grad(lambda p: jm.loss("lenet", model.apply(p, {}, x, True)[0], y)))(
        model.params)
    assert all(g.dtype == jnp.float32 for g in jax.tree_util.tree_leaves(grads))
    fp32 = jm.build("lenet", key())
    ref, _ = fp32.apply(fp32.params, fp32.state, x, True)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref), atol=0.05)


def test_bf16_resnet_keeps_fp32_bn_statistics() -> None:
    model = jm.build("resnet-56", key(), input_size=8, dtype=jnp.bfloat16)
    x, _ = jm.synthetic_batch("resnet-56", 2, jax.random.key(1), 8)
    out, state = model.apply(model.params, model.state, x, True)
    assert out.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(out)))
    assert all(s.dtype == jnp.float32 for s in jax.tree_util.tree_leaves(state))


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_model_differentiates_in_bf16_with_fp32_gradients(name: str) -> None:
    size = 32 if name == "resnet-50" else None
    model = jm.abstract_model(name, size, jnp.bfloat16)
    x = jax.ShapeDtypeStruct((2, *jm.input_shape(name, size)),
                             jnp.int32 if name == "lstm" else jnp.float32)
    y = jax.ShapeDtypeStruct((2, model_catalog.SEQ_LEN) if name == "lstm" else (2,), jnp.int32)

    def step(p: object, s: object, x: jax.Array, y: jax.Array) -> tuple[object, object]:
        def f(p: object) -> tuple[jax.Array, object]:
            logits, new = model.apply(p, s, x, True)
            return jm.loss(name, logits, y), new
        return jax.grad(f, has_aux=True)(p)

    grads, state = jax.eval_shape(step, model.params, model.state, x, y)  # traced only
    assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(model.params)
    assert all(g.dtype == jnp.float32 and g.shape == p.shape for g, p in zip(
        jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(model.params), strict=True))
    assert all(v.dtype == jnp.float32 for v in jax.tree_util.tree_leaves(state))


def test_flop_counter_counts_a_scan_body_once_per_step() -> None:
    w = jnp.zeros((3, 5))

    def f(x: jax.Array) -> jax.Array:
        return jax.lax.scan(lambda c, _: (c @ w @ w.T, None), x, None, length=7)[0]

    jaxpr = jax.make_jaxpr(f)(jnp.zeros((2, 3)))
    assert jax_layers.jaxpr_macs(jaxpr.jaxpr) == 7 * 2 * (2 * 3 * 5)
