"""TensorFlow models: the parameter counts of docs/models.md, equal to torch's; shapes, FLOPs."""

from __future__ import annotations

import pytest

from dltop import catalog
from dltop.runners.child import model_catalog

from .conftest import LazyModule

tm = LazyModule("dltop.runners.child.torch_models")
tf = LazyModule("tensorflow")
tfm = LazyModule("dltop.runners.child.tf_models")

COUNTS = {"fcn-s": 122_194_048, "fcn-r": 14_205_962, "alexnet-s": 61_100_840,
          "alexnet-r": 85_098, "resnet-50": 25_557_032, "resnet-56": 853_018,
          "lstm": 6_182_672, "lenet": 61_706, "vgg16": 138_357_544}

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]  # builds every model in both


def test_every_catalog_model_is_built() -> None:
    # The transformers are tf_lm's (tests/runners/test_tf_lm.py counts them).
    cnns = set(catalog.MODELS) - set(catalog.TRANSFORMER_MODELS)
    assert set(tfm.NAMES) == cnns == set(COUNTS) == set(tm.NAMES)


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_parameter_count_flops_and_forward(name: str) -> None:
    model = tfm.build(name)
    count = tfm.param_count(model)
    assert count == COUNTS[name]
    assert count == tm.param_count(tm.build(name))
    # Same layer shapes, so the same MAC-based estimate as the torch runner reports.
    assert tfm.training_flops_per_sample(name, model) == tm.training_flops_per_sample(name)
    x, y = tfm.synthetic_batch(name, 2)
    out = model(x, training=True)
    loss = tfm.loss_fn(name)(out, y)
    assert bool(tf.math.is_finite(loss))
    if name == "lstm":
        assert tuple(out.shape) == (2, model_catalog.SEQ_LEN, model_catalog.VOCAB)
    else:
        assert tuple(out.shape) == (2, tfm.NUM_CLASSES[name])


def test_lstm_has_two_trained_bias_vectors_per_layer() -> None:
    model = tfm.build("lstm")
    lstm = [v for v in model.trainable_variables if "bias_" in v.path]
    assert len(lstm) == 4 and all(tuple(v.shape) == (1024,) for v in lstm)
    x, y = tfm.synthetic_batch("lstm", 2)
    with tf.GradientTape() as tape:
        loss = tfm.loss_fn("lstm")(model(x, training=True), y)
    grads = tape.gradient(loss, lstm)
    assert all(g is not None and float(tf.reduce_sum(tf.abs(g))) > 0 for g in grads)


def test_resnet56_shortcut_a_has_no_parameters() -> None:
    model = tfm.build("resnet-56")
    shortcuts = [layer for layer in model.layers if isinstance(layer, tfm.ShortcutA)]
    assert len(shortcuts) == 2 and not any(s.weights for s in shortcuts)


def test_flops_fcn_r_is_exact() -> None:
    macs = 784 * 2048 + 2048 * 4096 + 4096 * 1024 + 1024 * 10
    assert tfm.training_flops_per_sample("fcn-r") == 6 * macs


def test_unknown_model() -> None:
    with pytest.raises(KeyError, match="unknown model"):
        tfm.build("vgg")


@pytest.mark.parametrize(("name", "size"), [("resnet-50", 32), ("resnet-56", 64)])
def test_input_size_matches_torch(name: str, size: int) -> None:
    model = tfm.build(name, input_size=size)
    assert tfm.param_count(model) == COUNTS[name]
    assert tfm.training_flops_per_sample(name, model) == tm.training_flops_per_sample(
        name, input_size=size)
    x, _ = tfm.synthetic_batch(name, 2, input_size=size)
    assert tuple(x.shape) == (2, size, size, 3)
    assert tuple(model(x, training=False).shape) == (2, tfm.NUM_CLASSES[name])
    with pytest.raises(ValueError, match="input_size applies to"):
        tfm.build("vgg16", input_size=size)
