"""Pure-JAX layers for jax_models: initialisers, apply functions and a FLOP counter.

Child side: imports only the standard library, jax and numpy (no flax, no optax; see
jax_models for why). Images are NHWC with HWIO kernels, the layout XLA prefers on
GPU and CPU. Initialisers copy PyTorch's defaults, as tf_models does: weights and
biases uniform in +-1/sqrt(fan_in) (``kaiming_uniform_(a=sqrt(5))``), BatchNorm
scale 1 and shift 0, embeddings N(0, 1), LSTM everything uniform in +-1/sqrt(hidden).

Every apply function takes fp32 parameters and casts them to the input's dtype, so
``x.astype(bfloat16)`` runs a layer in bf16 while the parameters (and their
gradients and SGD updates) stay fp32, as under torch's autocast.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

BN_MOMENTUM = 0.1
"""torch's BatchNorm2d momentum: running = (1 - m) * running + m * batch statistic."""
BN_EPS = 1e-5
_DIMS = ("NHWC", "HWIO", "NHWC")


class HostInit:
    """Initial values drawn with numpy on the host, then placed on JAX's default device.

    One numpy generator seeded from the JAX key: drawing on the host takes a fraction
    of a second even for VGG16, where ``jax.random`` compiles a threefry kernel for
    every distinct parameter shape (seconds each on a loaded CPU, before any step).
    """

    def __init__(self, key):
        if hasattr(key, "dtype") and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        self.rng = np.random.default_rng(np.asarray(key, np.uint32).ravel().tolist())

    def uniform(self, shape, bound):
        values = self.rng.random(shape, dtype=np.float32) * np.float32(2 * bound)
        return jnp.asarray(values - np.float32(bound))

    def normal(self, shape):
        return jnp.asarray(self.rng.standard_normal(shape, dtype=np.float32))

    def full(self, shape, value):
        return jnp.full(shape, value, jnp.float32)


class ShapeInit:
    """The same calls, giving ``jax.ShapeDtypeStruct``s: a model's shapes, nothing allocated."""

    def uniform(self, shape, bound):
        return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)

    def normal(self, shape):
        return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)

    def full(self, shape, value):
        return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)


def dense_init(rng, n_in, n_out):
    """A Linear layer's ``{"w": (n_in, n_out), "b": (n_out,)}``, torch's default init."""
    bound = 1.0 / math.sqrt(n_in)
    return {"w": rng.uniform((n_in, n_out), bound), "b": rng.uniform((n_out,), bound)}


def dense(p, x):
    """``x @ w + b`` over the last axis, in ``x``'s dtype."""
    return jnp.dot(x, p["w"].astype(x.dtype)) + p["b"].astype(x.dtype)


def conv_init(rng, c_in, c_out, k, bias=True):
    """A k x k convolution's ``{"w": (k, k, c_in, c_out)[, "b": (c_out,)]}``, torch's init."""
    bound = 1.0 / math.sqrt(c_in * k * k)
    p = {"w": rng.uniform((k, k, c_in, c_out), bound)}
    if bias:
        p["b"] = rng.uniform((c_out,), bound)
    return p


def conv(p, x, stride=1, pad=0):
    """Symmetric zero padding ``pad`` on both sides (torch's, not XLA's "SAME")."""
    y = lax.conv_general_dilated(x, p["w"].astype(x.dtype), (stride, stride),
                                 ((pad, pad), (pad, pad)), dimension_numbers=_DIMS)
    return y + p["b"].astype(x.dtype) if "b" in p else y


def bn_init(rng, channels):
    """BatchNorm's ``(params, state)``: trainable scale/shift, running mean/variance."""
    params = {"scale": rng.full((channels,), 1.0), "shift": rng.full((channels,), 0.0)}
    state = {"mean": rng.full((channels,), 0.0), "var": rng.full((channels,), 1.0)}
    return params, state


def batch_norm(p, s, x, train):
    """torch's BatchNorm2d over N, H, W: ``(y, new_state)``.

    Training normalises with the batch's biased variance and moves the running
    variance towards the unbiased one (as torch does); statistics are computed in
    fp32 whatever the input's dtype (torch's cuDNN batch norm does the same under autocast).
    """
    xf = x.astype(jnp.float32)
    if train:
        mean = jnp.mean(xf, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(xf - mean), axis=(0, 1, 2))
        n = x.shape[0] * x.shape[1] * x.shape[2]
        unbiased = var * (n / max(n - 1, 1))
        s = {"mean": (1 - BN_MOMENTUM) * s["mean"] + BN_MOMENTUM * mean,
             "var": (1 - BN_MOMENTUM) * s["var"] + BN_MOMENTUM * unbiased}
    else:
        mean, var = s["mean"], s["var"]
    y = (xf - mean) * lax.rsqrt(var + BN_EPS) * p["scale"] + p["shift"]
    return y.astype(x.dtype), s


def max_pool(x, k, stride, pad=0):
    """torch's MaxPool2d (floor mode; padding counts as -inf)."""
    # A concrete (numpy) init value: lax only differentiates the max and add windows
    # it recognises as such, which a traced jnp constant is not.
    init = np.array(-np.inf, x.dtype)
    return lax.reduce_window(x, init, lax.max, (1, k, k, 1), (1, stride, stride, 1),
                             ((0, 0), (pad, pad), (pad, pad), (0, 0)))


def avg_pool(x, k, stride):
    """torch's AvgPool2d without padding (floor mode)."""
    total = lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, k, k, 1),
                              (1, stride, stride, 1), "VALID")
    return total / (k * k)


def flatten(x):
    """Keep the batch axis, flatten the rest (H, W, C order: same size as torch's C, H, W)."""
    return x.reshape((x.shape[0], -1))


def embed_init(rng, vocab, width):
    """torch's nn.Embedding: N(0, 1)."""
    return {"table": rng.normal((vocab, width))}


def lstm_init(rng, n_in, hidden):
    """One torch ``nn.LSTM`` layer: both bias vectors (docs/models.md counts them)."""
    bound = 1.0 / math.sqrt(hidden)
    return {"w_ih": rng.uniform((n_in, 4 * hidden), bound),
            "w_hh": rng.uniform((hidden, 4 * hidden), bound),
            "b_ih": rng.uniform((4 * hidden,), bound),
            "b_hh": rng.uniform((4 * hidden,), bound)}


def lstm(p, x):
    """One LSTM layer over ``x`` (batch, steps, features), zero initial state.

    Gates in torch's order i, f, g, o. The input projection of every step is one
    matrix product; the recurrence is a ``lax.scan`` (compiled once, not unrolled).
    """
    dt = x.dtype
    hidden = p["w_hh"].shape[0]
    xw = jnp.dot(x, p["w_ih"].astype(dt)) + p["b_ih"].astype(dt)
    w_hh, b_hh = p["w_hh"].astype(dt), p["b_hh"].astype(dt)

    def step(carry, xw_t):
        h, c = carry
        z = xw_t + jnp.dot(h, w_hh) + b_hh
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((x.shape[0], hidden), dt)
    _, hs = lax.scan(step, (zeros, zeros), jnp.swapaxes(xw, 0, 1))
    return jnp.swapaxes(hs, 0, 1)


def _prod(dims):
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _eqn_macs(eqn):
    name = eqn.primitive.name
    if name == "dot_general":
        (contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        return _prod(eqn.outvars[0].aval.shape) * _prod(lhs[d] for d in contract)
    if name == "conv_general_dilated":
        rhs = eqn.invars[1].aval.shape
        spec = eqn.params["dimension_numbers"].rhs_spec  # (out, in, spatial...)
        per_output = _prod(rhs[d] for d in spec[1:])
        return _prod(eqn.outvars[0].aval.shape) * per_output
    return 0


def jaxpr_macs(jaxpr):
    """Multiply-accumulates of the matrix products and convolutions of a jaxpr.

    Sub-jaxprs (jit, custom derivatives) are walked; a ``scan`` body counts once
    per iteration. Element-wise work, reductions and gathers count nothing.
    """
    total = 0
    for eqn in jaxpr.eqns:
        total += _eqn_macs(eqn)
        times = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += times * jaxpr_macs(inner)
    return total
