"""PyTorch models: exact parameter counts of docs/models.md, output shapes, FLOP estimates."""

from __future__ import annotations

import pytest
import torch

from dltop import catalog
from dltop.runners.child import model_catalog
from dltop.runners.child import torch_models as tm

COUNTS = {"fcn-s": 122_194_048, "fcn-r": 14_205_962, "alexnet-s": 61_100_840,
          "alexnet-r": 85_098, "resnet-50": 25_557_032, "resnet-56": 853_018,
          "lstm": 6_182_672}


def test_every_catalog_model_is_built() -> None:
    assert set(tm.NAMES) == set(catalog.MODELS) == set(COUNTS)


@pytest.mark.parametrize("name", sorted(COUNTS))
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
