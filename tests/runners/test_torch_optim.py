"""The PyTorch runner's optimizers make exactly the updates of docs/profiles.md "Optimizers"."""

from __future__ import annotations

from typing import Any

import dltop_protocol
import pytest
import torch
import torch_optim

LR, WD, MOMENTUM = 0.1, 0.05, 0.9


def tiny() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def grads(model: torch.nn.Module, seed: int) -> list[torch.Tensor]:
    """Back-propagate a fixed loss; return each parameter's gradient."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, generator=g)
    model.zero_grad(set_to_none=True)
    (model(x) ** 2).mean().backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def first_step(optimizer: str, **keys: Any) -> tuple[list[torch.Tensor], list[torch.Tensor],
                                                     list[torch.Tensor]]:
    model = tiny()
    spec = {"optimizer": optimizer, "lr": LR, "momentum": 0.0, "weight_decay": WD, **keys}
    opt = torch_optim.build(spec, model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    g = grads(model, 1)
    opt.step()
    return before, g, [p.detach().clone() for p in model.parameters()]


def test_adam_first_step_is_the_formula_with_coupled_l2() -> None:
    before, g, after = first_step("adam")
    for w, gw, w1 in zip(before, g, after, strict=True):
        gl2 = gw + WD * w  # L2 joins the gradient before the moments
        m_hat = (1 - 0.9) * gl2 / (1 - 0.9)
        v_hat = (1 - 0.999) * gl2 ** 2 / (1 - 0.999)
        expect = w - LR * m_hat / (v_hat.sqrt() + 1e-8)
        torch.testing.assert_close(w1, expect, rtol=1e-6, atol=1e-7)


def test_adamw_first_step_is_the_formula_with_decoupled_decay() -> None:
    before, g, after = first_step("adamw")
    for w, gw, w1 in zip(before, g, after, strict=True):
        expect = w - LR * WD * w - LR * gw / (gw.abs() + 1e-8)
        torch.testing.assert_close(w1, expect, rtol=1e-6, atol=1e-7)
    # Decoupled differs from coupled: the same run with adam lands elsewhere.
    _, _, adam_after = first_step("adam")
    assert not all(torch.allclose(a, b) for a, b in zip(after, adam_after, strict=True))


def test_adamw_without_weight_decay_does_not_decay() -> None:
    """PyTorch's AdamW defaults to weight_decay 0.01; weight_decay = 0 must mean none."""
    before, g, after = first_step("adamw", weight_decay=0.0)
    for w, gw, w1 in zip(before, g, after, strict=True):
        torch.testing.assert_close(w1, w - LR * gw / (gw.abs() + 1e-8), rtol=1e-6, atol=1e-7)


def test_sgd_momentum_and_weight_decay_two_steps() -> None:
    model = tiny()
    spec = {"optimizer": "sgd", "lr": LR, "momentum": MOMENTUM, "weight_decay": WD}
    opt = torch_optim.build(spec, model.parameters())
    w0 = [p.detach().clone() for p in model.parameters()]
    g0 = grads(model, 1)
    opt.step()
    w1 = [p.detach().clone() for p in model.parameters()]
    g1 = grads(model, 2)
    opt.step()
    w2 = [p.detach().clone() for p in model.parameters()]
    for a0, b0, a1, b1, a2 in zip(w0, g0, w1, g1, w2, strict=True):
        v1 = b0 + WD * a0
        torch.testing.assert_close(a1, a0 - LR * v1)
        v2 = MOMENTUM * v1 + (b1 + WD * a1)
        torch.testing.assert_close(a2, a1 - LR * v2)


def test_plain_sgd_step() -> None:
    before, g, after = first_step("sgd", weight_decay=0.0)
    for w, gw, w1 in zip(before, g, after, strict=True):
        torch.testing.assert_close(w1, w - LR * gw)


def test_unknown_optimizer_is_unsupported() -> None:
    with pytest.raises(dltop_protocol.Unsupported, match="rmsprop"):
        torch_optim.build({"optimizer": "rmsprop", "lr": 0.1}, tiny().parameters())
