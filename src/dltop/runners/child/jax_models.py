"""The nine benchmark models of docs/models.md in pure JAX, with inputs, loss and FLOPs.

Child side (run by the JAX interpreter, Python >= 3.10, so the 3.6 rule does not
apply): the standard library, jax, numpy and sibling child modules only. No flax
and no optax: a model here is a parameter pytree plus a pure ``apply`` function,
which is all a benchmark needs, and it runs wherever a bare ``jax`` (CPU or CUDA
wheel) is installed, the GPU machines included, with no second package whose
versions must match JAX's. Layer shapes, parameter counts and FLOPs equal
torch_models' (tests check them); initialisation copies torch's defaults
(jax_layers), so loss curves are comparable across frameworks.

Layout: images are NHWC (``input_shape``), the layout XLA's convolutions prefer;
``fcn-*`` take (batch, features) floats, ``lstm`` int32 token ids (batch, 32) and
gives logits (batch, 32, 10000).

Precision: ``build(..., dtype=jnp.bfloat16)`` sets the compute dtype. Parameters
stay fp32 (so do gradients and SGD updates, and BN statistics); ``apply`` casts
inputs and parameters to the compute dtype layer by layer, the mixed precision of
torch's autocast. :func:`loss` computes the softmax cross-entropy in fp32.
"""

import collections

import jax
import jax.numpy as jnp
import jax_layers as L
import numpy as np
from model_catalog import (
    NAMES,
    NUM_CLASSES,
    VGG16_CONFIG,
    VOCAB,
    builder,
    builders,
)
from model_catalog import input_shape as _catalog_input_shape

Model = collections.namedtuple("Model", "params state apply")
"""``params``: trainable pytree (fp32); ``state``: BN running statistics ({} if none);
``apply(params, state, x, train) -> (logits, new_state)``: pure, jit-able with ``train``
static (a Python bool)."""

__all__ = ["NAMES", "Model", "abstract_model", "build", "input_shape", "loss", "param_count",
           "synthetic_batch", "training_flops_per_sample"]


def _sequential(ops, rng, dtype):
    """A model of a list of ops without state: ("conv", c_in, c_out, k, stride, pad),
    ("dense", n_in, n_out), ("relu",), ("sigmoid",), ("maxpool", k, stride),
    ("avgpool", k, stride), ("flatten",)."""
    params = []
    for op in ops:
        if op[0] == "conv":
            params.append(L.conv_init(rng, op[1], op[2], op[3]))
        elif op[0] == "dense":
            params.append(L.dense_init(rng, op[1], op[2]))
        else:
            params.append({})

    def apply(params, state, x, train):
        x = x.astype(dtype)
        for op, p in zip(ops, params, strict=True):
            kind = op[0]
            if kind == "conv":
                x = L.conv(p, x, op[4], op[5])
            elif kind == "dense":
                x = L.dense(p, x)
            elif kind == "relu":
                x = jax.nn.relu(x)
            elif kind == "sigmoid":
                x = jax.nn.sigmoid(x)
            elif kind == "maxpool":
                x = L.max_pool(x, op[1], op[2])
            elif kind == "avgpool":
                x = L.avg_pool(x, op[1], op[2])
            elif kind == "flatten":
                x = L.flatten(x)
            else:
                raise ValueError("unknown op %r" % (kind,))
        return x, state

    return Model(params, {}, apply)


def _fcn(sizes, rng, dtype, input_size=None):
    ops = []
    for i in range(len(sizes) - 1):
        ops.append(("dense", sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            ops.append(("sigmoid",))
    return _sequential(ops, rng, dtype)


def _conv_relu(c_in, c_out, k, stride=1, pad=0):
    return [("conv", c_in, c_out, k, stride, pad), ("relu",)]


def _alexnet_s(rng, dtype, input_size=None):
    ops = (_conv_relu(3, 64, 11, 4, 2) + [("maxpool", 3, 2)]
           + _conv_relu(64, 192, 5, 1, 2) + [("maxpool", 3, 2)]
           + _conv_relu(192, 384, 3, 1, 1) + _conv_relu(384, 256, 3, 1, 1)
           + _conv_relu(256, 256, 3, 1, 1) + [("maxpool", 3, 2), ("flatten",),
                                               ("dense", 9216, 4096), ("relu",),
                                               ("dense", 4096, 4096), ("relu",),
                                               ("dense", 4096, 1000)])
    return _sequential(ops, rng, dtype)


def _alexnet_r(rng, dtype, input_size=None):
    # cuda-convnet "18pct" without local response normalisation; pool before ReLU first.
    ops = ([("conv", 3, 32, 5, 1, 2), ("maxpool", 3, 2), ("relu",)]
           + _conv_relu(32, 32, 5, 1, 2) + [("maxpool", 3, 2)]
           + _conv_relu(32, 64, 5, 1, 2) + [("avgpool", 3, 2), ("flatten",),
                                             ("dense", 576, 10)])
    return _sequential(ops, rng, dtype)


def _lenet(rng, dtype, input_size=None):
    # LeNet-5 on 28x28x1: the first convolution pads by 2, as for 32x32 inputs.
    ops = (_conv_relu(1, 6, 5, 1, 2) + [("maxpool", 2, 2)]
           + _conv_relu(6, 16, 5) + [("maxpool", 2, 2), ("flatten",),
                                     ("dense", 400, 120), ("relu",),
                                     ("dense", 120, 84), ("relu",), ("dense", 84, 10)])
    return _sequential(ops, rng, dtype)


def _vgg16(rng, dtype, input_size=None):
    # Configuration D; no dropout, no batch normalisation (as AlexNet here).
    ops, channels = [], 3
    for width in VGG16_CONFIG:
        if width == "M":
            ops.append(("maxpool", 2, 2))
        else:
            ops += _conv_relu(channels, width, 3, 1, 1)
            channels = width
    ops += [("flatten",), ("dense", 512 * 7 * 7, 4096), ("relu",),
            ("dense", 4096, 4096), ("relu",), ("dense", 4096, 1000)]
    return _sequential(ops, rng, dtype)


class _Init:
    """Makes a convolution with its BN as one ``(params, state)`` pair."""

    def __init__(self, rng):
        self.rng = rng

    def conv_bn(self, c_in, c_out, k):
        # ResNet convolutions carry no bias (BN's shift replaces it).
        bn_p, bn_s = L.bn_init(self.rng, c_out)
        return {"conv": L.conv_init(self.rng, c_in, c_out, k, bias=False), "bn": bn_p}, bn_s


def _conv_bn(p, s, x, train, stride=1, pad=0, relu=True):
    y, s = L.batch_norm(p["bn"], s, L.conv(p["conv"], x, stride, pad), train)
    return (jax.nn.relu(y) if relu else y), s


def _resnet(stem, blocks, block_fn, rng, dtype, n_classes, width):
    """A ResNet: ``stem`` and each block are ``(params, state, static)``; global average
    pool and a Linear head. ``block_fn(p, s, x, train, static) -> (y, s)``."""
    init = _Init(rng)
    stem_p, stem_s, stem_static = stem(init)
    made = [b(init) for b in blocks]
    params = {"stem": stem_p, "blocks": [m[0] for m in made],
              "fc": L.dense_init(rng, width, n_classes)}
    state = {"stem": stem_s, "blocks": [m[1] for m in made]}
    statics = [m[2] for m in made]

    def apply(params, state, x, train):
        x, stem_state = stem_static(params["stem"], state["stem"], x.astype(dtype), train)
        block_states = []
        for p, s, static in zip(params["blocks"], state["blocks"], statics, strict=True):
            x, s = block_fn(p, s, x, train, static)
            block_states.append(s)
        pooled = jnp.mean(x, axis=(1, 2))
        return L.dense(params["fc"], pooled), {"stem": stem_state, "blocks": block_states}

    return Model(params, state, apply)


def _bottleneck_init(c_in, planes, stride):
    def make(init):
        out = planes * 4
        p, s = {}, {}
        p["a"], s["a"] = init.conv_bn(c_in, planes, 1)
        p["b"], s["b"] = init.conv_bn(planes, planes, 3)
        p["c"], s["c"] = init.conv_bn(planes, out, 1)
        if stride != 1 or c_in != out:
            p["down"], s["down"] = init.conv_bn(c_in, out, 1)
        return p, s, stride
    return make


def _bottleneck(p, s, x, train, stride):
    new = {}
    y, new["a"] = _conv_bn(p["a"], s["a"], x, train)
    y, new["b"] = _conv_bn(p["b"], s["b"], y, train, stride, 1)  # v1: stride on the 3x3
    y, new["c"] = _conv_bn(p["c"], s["c"], y, train, relu=False)
    short = x
    if "down" in p:
        short, new["down"] = _conv_bn(p["down"], s["down"], x, train, stride, relu=False)
    return jax.nn.relu(y + short), new


def _resnet50(rng, dtype, input_size=None):
    # Any input_size works: the global average pool takes what the stages leave.
    def stem(init):
        p, s = init.conv_bn(3, 64, 7)

        def apply(p, s, x, train):
            y, s = _conv_bn(p, s, x, train, 2, 3)
            return L.max_pool(y, 3, 2, 1), s
        return p, s, apply

    blocks, c_in = [], 64
    for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(count):
            blocks.append(_bottleneck_init(c_in, planes, stride if i == 0 else 1))
            c_in = planes * 4
    return _resnet(stem, blocks, _bottleneck, rng, dtype, NUM_CLASSES["resnet-50"], 2048)


def _basic_a_init(c_in, planes, stride):
    def make(init):
        p, s = {}, {}
        p["a"], s["a"] = init.conv_bn(c_in, planes, 3)
        p["b"], s["b"] = init.conv_bn(planes, planes, 3)
        return p, s, (stride, planes - c_in)
    return make


def _basic_a(p, s, x, train, static):
    """CIFAR basic block; option A shortcut: subsample, zero-pad channels (no parameters)."""
    stride, pad = static
    new = {}
    y, new["a"] = _conv_bn(p["a"], s["a"], x, train, stride, 1)
    y, new["b"] = _conv_bn(p["b"], s["b"], y, train, 1, 1, relu=False)
    short = x
    if stride != 1 or pad:
        short = jnp.pad(x[:, ::stride, ::stride, :],
                        ((0, 0), (0, 0), (0, 0), (pad // 2, pad - pad // 2)))
    return jax.nn.relu(y + short), new


def _resnet56(rng, dtype, input_size=None):
    def stem(init):
        p, s = init.conv_bn(3, 16, 3)
        return p, s, lambda p, s, x, train: _conv_bn(p, s, x, train, 1, 1)

    blocks, c_in = [], 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(9):
            blocks.append(_basic_a_init(c_in, planes, stride if i == 0 else 1))
            c_in = planes
    return _resnet(stem, blocks, _basic_a, rng, dtype, NUM_CLASSES["resnet-56"], 64)


def _lstm(rng, dtype, input_size=None):
    """Embedding 10000->256, 2-layer LSTM (hidden 256), Linear 256->10000 at every step."""
    params = {"embed": L.embed_init(rng, VOCAB, 256),
              "lstm": [L.lstm_init(rng, 256, 256), L.lstm_init(rng, 256, 256)],
              "out": L.dense_init(rng, 256, VOCAB)}

    def apply(params, state, ids, train):
        x = jnp.take(params["embed"]["table"], ids, axis=0).astype(dtype)
        for layer in params["lstm"]:
            x = L.lstm(layer, x)
        return L.dense(params["out"], x), state

    return Model(params, {}, apply)


_BUILDERS = builders(fcn=_fcn, alexnet_s=_alexnet_s, alexnet_r=_alexnet_r,
                     resnet_50=_resnet50, resnet_56=_resnet56, lstm=_lstm,
                     lenet=_lenet, vgg16=_vgg16)


def input_shape(name, input_size=None):
    """One sample's input shape in the layout ``apply`` expects (images ``(H, W, C)``).

    Raises:
        ValueError: ``input_size`` for a model other than the ResNets, or too small.
    """
    return _catalog_input_shape(name, channels_last=True, input_size=input_size)


def build(name, key, input_size=None, dtype=jnp.float32):
    """A freshly initialised :class:`Model` by docs/models.md name.

    Args:
        name: one of ``NAMES``.
        key: a ``jax.random`` key (typed or raw) or an int: seeds the initial values,
            drawn on the host with numpy (``jax_layers.HostInit``).
        input_size: the ResNets' image side (None: the model's own).
        dtype: the compute dtype (fp32 or bf16); parameters stay fp32.

    Raises:
        KeyError: an unknown model.
        ValueError: ``input_size`` for another model, or below the minimum.
    """
    make = builder(_BUILDERS, name)
    input_shape(name, input_size)  # ValueError unless input_size fits the model
    return make(L.HostInit(key), jnp.dtype(dtype), input_size=input_size)


def param_count(params):
    """Trainable parameters: every leaf of ``params`` (BN running statistics live in state)."""
    return sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))


def loss(name, logits, labels):
    """Mean softmax cross-entropy in fp32; for the LSTM over every step of every sequence."""
    logits = logits.astype(jnp.float32).reshape((-1, logits.shape[-1]))
    labels = labels.reshape((-1,)).astype(jnp.int32)
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def synthetic_batch(name, batch, key, input_size=None):
    """Random fp32 inputs (int32 token ids for the LSTM) and int32 labels of the model's
    shapes, drawn on the host from ``key`` (a JAX key or an int), as ``jnp`` arrays."""
    rng = L.HostInit(key).rng
    shape = (batch,) + input_shape(name, input_size)
    if name == "lstm":
        x = rng.integers(0, VOCAB, shape, dtype=np.int32)
        y = rng.integers(0, VOCAB, shape, dtype=np.int32)
    else:
        x = rng.standard_normal(shape, dtype=np.float32)
        y = rng.integers(0, NUM_CLASSES[name], (batch,), dtype=np.int32)
    return jnp.asarray(x), jnp.asarray(y)


def abstract_model(name, input_size=None, dtype=jnp.float32):
    """:class:`Model` whose params and state are ``jax.ShapeDtypeStruct``s: nothing is
    initialised or allocated (shape checks with ``jax.eval_shape``, FLOPs)."""
    make = builder(_BUILDERS, name)
    input_shape(name, input_size)
    return make(L.ShapeInit(), jnp.dtype(dtype), input_size=input_size)


def training_flops_per_sample(name, input_size=None):
    """Approximate FLOPs of one training sample: 3 x forward (2 x multiply-accumulates).

    The formula of torch_models and tf_models: the multiply-accumulates of the model's
    matrix products and convolutions, read off the jaxpr of a forward pass on one
    sample (traced abstractly, nothing computed or allocated); element-wise work,
    BN, pooling and embedding lookups are left out.
    """
    model = abstract_model(name, input_size)
    x = jax.ShapeDtypeStruct((1,) + input_shape(name, input_size),
                             jnp.int32 if name == "lstm" else jnp.float32)
    jaxpr = jax.make_jaxpr(lambda p, s, x: model.apply(p, s, x, False))(
        model.params, model.state, x)
    return 3.0 * 2.0 * L.jaxpr_macs(jaxpr.jaxpr)
