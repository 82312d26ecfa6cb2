"""The TensorFlow runner's optimizers make PyTorch's updates (docs/profiles.md "Optimizers")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .conftest import LazyModule  # and the child modules on sys.path

tf = LazyModule("tensorflow")
tf_train = LazyModule("tf_train")

pytestmark = [pytest.mark.tensorflow]

W0 = np.array([[0.5, -1.0, 0.25], [2.0, 0.1, -0.3]], dtype=np.float32)
X = np.array([[1.0, -2.0], [0.5, 0.3], [-1.0, 1.5], [0.2, 0.2]], dtype=np.float32)
TARGET = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.5], [0.3, -0.2, 0.1], [1.0, 1.0, 1.0]],
                  dtype=np.float32)


def grad_of(w: np.ndarray) -> np.ndarray:
    """d/dw of mean((x @ w - target)^2): the tiny model's gradient."""
    return (2.0 * X.T @ (X @ w - TARGET) / TARGET.size).astype(np.float32)


def tf_steps(spec: dict[str, Any], steps: int, dtype: Any = np.float32) -> list[np.ndarray]:
    opt = tf_train.optimizer({"lr": 0.1, "momentum": 0.0, **spec})
    w = tf.Variable(W0.astype(dtype))
    opt.build([w])
    out = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(X.astype(dtype), w) - TARGET))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        out.append(w.numpy().copy())
    return out


def test_adam_first_step_is_pytorchs_formula() -> None:
    lr, wd, eps = 0.1, 0.05, 1e-8
    g = grad_of(W0) + wd * W0  # L2 coupled: added to the gradient
    m, v = 0.1 * g, 0.001 * g * g
    m_hat, v_hat = m / (1 - 0.9), v / (1 - 0.999)
    expected = W0 - lr * m_hat / (np.sqrt(v_hat) + eps)
    got = tf_steps({"optimizer": "adam", "weight_decay": wd}, 1)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=2e-6)


def test_adamw_first_step_decays_decoupled() -> None:
    lr, wd, eps = 0.1, 0.05, 1e-8
    g = grad_of(W0)  # no L2 term: the decay acts on the weight
    m_hat, v_hat = g, g * g
    expected = W0 * (1 - lr * wd) - lr * m_hat / (np.sqrt(v_hat) + eps)
    got = tf_steps({"optimizer": "adamw", "weight_decay": wd}, 1)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=2e-6)


def test_adam_epsilon_is_pytorchs_not_keras() -> None:
    # A gradient of 1e-9 shows where epsilon sits: PyTorch's sqrt(v_hat) + 1e-8 gives a step
    # of lr * 1e-9 / 1.1e-8; Keras' default (1e-7 outside the correction) a far smaller one.
    opt = tf_train.optimizer({"optimizer": "adam", "lr": 1.0, "momentum": 0.0})
    w = tf.Variable([0.0])
    opt.build([w])
    opt.apply_gradients([(tf.constant([1e-9]), w)])
    assert w.numpy()[0] == pytest.approx(-1e-9 / (1e-9 + 1e-8), rel=1e-4)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_several_steps_match_torch(name: str) -> None:
    import torch
    spec = {"optimizer": name, "lr": 0.05, "momentum": 0.9 if name == "sgd" else 0.0,
            "weight_decay": 0.1}
    # float64 on both sides: what is left is the formula, not rounding (but for Keras'
    # float32 learning rate variable: 1e-8 relative).
    w = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    kw = {"momentum": 0.9} if name == "sgd" else {"eps": 1e-8}
    opt = cls([w], lr=0.05, weight_decay=0.1, **kw)
    expected = []
    for _ in range(5):
        opt.zero_grad()
        torch.mean((torch.tensor(X, dtype=torch.float64) @ w
                    - torch.tensor(TARGET, dtype=torch.float64)) ** 2).backward()
        opt.step()
        expected.append(w.detach().numpy().copy())
    got_steps = tf_steps(spec, 5, np.float64)
    for step, (got, want) in enumerate(zip(got_steps, expected, strict=True)):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8, err_msg=f"step {step}")


def test_sgd_weight_decay_is_l2_on_the_gradient() -> None:
    lr, wd = 0.1, 0.5
    got = tf_steps({"optimizer": "sgd", "lr": lr, "weight_decay": wd}, 1)[0]
    np.testing.assert_allclose(got, W0 - lr * (grad_of(W0) + wd * W0), rtol=1e-6)
    assert not np.allclose(got, W0 - lr * grad_of(W0), rtol=1e-4)
