"""Stand-in for the JAX models (fcn-r and lenet only), written to the contract the JAX
runner codes against; the full module (all nine models) comes from the jaxmodels branch.

Valid Python 3.6 (child side). Contract::

    Model = namedtuple("Model", "params state apply")
    build(name, key, input_size=None, dtype=jnp.float32) -> Model
        # apply(params, state, x, train) -> (logits, new_state); images NHWC
    loss(name, logits, labels) -> scalar
    param_count(params) -> int
    input_shape(name, input_size=None) -> tuple
"""

import collections
import math

import jax
import jax.numpy as jnp
import model_catalog

Model = collections.namedtuple("Model", "params state apply")


def input_shape(name, input_size=None):
    """One sample's input shape, images channels last (NHWC without the N)."""
    return model_catalog.input_shape(name, channels_last=True, input_size=input_size)


def _uniform(key, shape, bound, dtype):
    return jax.random.uniform(key, shape, dtype, -bound, bound)


def _dense_init(key, n_in, n_out, dtype):
    kw, kb = jax.random.split(key)
    bound = 1.0 / math.sqrt(n_in)
    return {"w": _uniform(kw, (n_in, n_out), bound, dtype),
            "b": _uniform(kb, (n_out,), bound, dtype)}


def _conv_init(key, k, c_in, c_out, dtype):
    kw, kb = jax.random.split(key)
    bound = 1.0 / math.sqrt(k * k * c_in)
    return {"w": _uniform(kw, (k, k, c_in, c_out), bound, dtype),
            "b": _uniform(kb, (c_out,), bound, dtype)}


def _dense(p, x):
    return x @ p["w"] + p["b"]


def _conv(p, x, pad):
    y = jax.lax.conv_general_dilated(x, p["w"], (1, 1), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + p["b"]


def _maxpool2(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def _fcn_r(key, dtype):
    sizes = model_catalog.FCN_SIZES["fcn-r"]
    keys = jax.random.split(key, len(sizes) - 1)
    params = [_dense_init(k, a, b, dtype) for k, a, b in
              zip(keys, sizes[:-1], sizes[1:])]  # noqa: B905 - no strict= in 3.6

    def apply(params, state, x, train):
        for i, p in enumerate(params):
            x = _dense(p, x)
            if i < len(params) - 1:
                x = jax.nn.sigmoid(x)
        return x, state
    return Model(params, {}, apply)


def _lenet(key, dtype):
    k = jax.random.split(key, 5)
    params = {"c1": _conv_init(k[0], 5, 1, 6, dtype), "c2": _conv_init(k[1], 5, 6, 16, dtype),
              "f1": _dense_init(k[2], 400, 120, dtype), "f2": _dense_init(k[3], 120, 84, dtype),
              "f3": _dense_init(k[4], 84, 10, dtype)}

    def apply(params, state, x, train):
        x = _maxpool2(jax.nn.relu(_conv(params["c1"], x, 2)))
        x = _maxpool2(jax.nn.relu(_conv(params["c2"], x, 0)))
        x = x.reshape((x.shape[0], -1))
        x = jax.nn.relu(_dense(params["f1"], x))
        x = jax.nn.relu(_dense(params["f2"], x))
        return _dense(params["f3"], x), state
    return Model(params, {}, apply)


_BUILDERS = {"fcn-r": _fcn_r, "lenet": _lenet}


def build(name, key, input_size=None, dtype=jnp.float32):
    """The model ``name`` with parameters drawn from ``key``."""
    if name not in _BUILDERS:
        raise KeyError("the stand-in jax_models has only %s, not %r"
                       % (", ".join(sorted(_BUILDERS)), name))
    if input_size is not None:
        model_catalog.checked_input_size(name, input_size)
    return _BUILDERS[name](key, dtype)


def loss(name, logits, labels):
    """Mean cross-entropy over samples (over every token for the LSTM)."""
    logits = logits.reshape((-1, logits.shape[-1])).astype(jnp.float32)
    labels = labels.reshape((-1,))
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def param_count(params):
    """Trainable parameters (every leaf of ``params``)."""
    return int(sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params)))
