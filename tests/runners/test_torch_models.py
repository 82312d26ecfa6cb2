"""PyTorch models: exact parameter counts of docs/models.md, output shapes, FLOP estimates."""

from __future__ import annotations

import pytest
import torch

from dltop import catalog
from dltop.runners.child import lm_catalog, model_catalog
from dltop.runners.child import torch_models as tm

COUNTS = {"fcn-s": 122_194_048, "fcn-r": 14_205_962, "alexnet-s": 61_100_840,
          "alexnet-r": 85_098, "resnet-50": 25_557_032, "resnet-56": 853_018,
          "lstm": 6_182_672, "lenet": 61_706, "vgg16": 138_357_544}


def test_every_catalog_model_is_built() -> None:
    # The transformers are torch_lm's (tests/runners/test_torch_lm.py counts them).
    cnns = set(catalog.MODELS) - set(catalog.TRANSFORMER_MODELS)
    assert set(tm.NAMES) == cnns == set(COUNTS)
    assert set(lm_catalog.NAMES) == set(catalog.TRANSFORMER_MODELS)


# The ImageNet-sized models take seconds each to initialise and run at 224x224.
BIG = {"fcn-s", "alexnet-s", "vgg16", "resnet-50"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in BIG else n
                                  for n in sorted(COUNTS)])
def test_parameter_count_and_forward(name: str) -> None:
    model = tm.build(name)
    assert tm.param_count(model) == COUNTS[name]
    x, y = tm.synthetic_batch(name, 2, torch.device("cpu"))
    out = model(x)
    loss = tm.loss_fn(name)(out, y)
    assert torch.isfinite(loss)
    if name == "lstm":
        assert out.shape == (2, model_catalog.SEQ_LEN, model_catalog.VOCAB)
    else:
        assert out.shape == (2, tm.NUM_CLASSES[name])


def test_flops_fcn_r_is_exact() -> None:
    macs = 784 * 2048 + 2048 * 4096 + 4096 * 1024 + 1024 * 10
    assert tm.training_flops_per_sample("fcn-r") == 6 * macs


def test_unknown_model() -> None:
    with pytest.raises(KeyError, match="unknown model"):
        tm.build("vgg")


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_flops_lenet_and_vgg16_are_exact() -> None:
    lenet = 6 * 28 * 28 * 25 + 16 * 10 * 10 * 150 + 400 * 120 + 120 * 84 + 84 * 10
    assert tm.training_flops_per_sample("lenet") == 6 * lenet
    convs, side, channels = 0, 224, 3
    for width in model_catalog.VGG16_CONFIG:
        if width == "M":
            side //= 2
        else:
            convs += side * side * width * 9 * channels
            channels = width
    vgg = convs + 25088 * 4096 + 4096 * 4096 + 4096 * 1000
    assert tm.training_flops_per_sample("vgg16") == 6 * vgg == 92_821_585_920


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_input_size_changes_the_resnets_input_not_their_parameters() -> None:
    model = tm.build("resnet-50", input_size=32)
    assert tm.param_count(model) == 25_557_032
    x, _ = tm.synthetic_batch("resnet-50", 2, torch.device("cpu"), input_size=32)
    assert x.shape == (2, 3, 32, 32) and model(x).shape == (2, 1000)
    # (32 / 224)^2 of the work, exactly, in the convolutions; the fc layer stays
    full = tm.training_flops_per_sample("resnet-50")
    small = tm.training_flops_per_sample("resnet-50", input_size=32)
    fc = 6 * 2048 * 1000
    assert small - fc == pytest.approx((full - fc) / 49, rel=0.02)
    assert tm.training_flops_per_sample("resnet-56", input_size=64) == pytest.approx(
        4 * tm.training_flops_per_sample("resnet-56") - 3 * 6 * 640, rel=1e-9)
    for bad, match in ((("lenet", 32), "input_size applies to resnet-50, resnet-56"),
                       (("resnet-56", 4), "at least 8")):
        with pytest.raises(ValueError, match=match):
            tm.build(*bad)
