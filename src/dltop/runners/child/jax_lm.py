"""The transformer decoders of lm_catalog (GPT-2 and Llama 3 blocks) in pure JAX.

Child side: the standard library, jax, numpy and sibling child modules only; valid
Python 3.6 syntax. The architectures are lm_catalog's module docstring, built from
its ``SHAPES`` and nothing else, so that PyTorch, JAX and TensorFlow run one model.

Parameters are float32 (weights ``(in, out)``, ``x @ w``); every matrix product runs
in the compute dtype (``bf16`` casts weights and activations, as jax_layers does for
the CNNs and torch's autocast does), while the norms, RoPE's angles and the softmax of
the ``plain`` attention run in float32 and cast back. Initialisation (every framework):
weights N(0, 0.02), the residual output projections (attention out, MLP down / out)
N(0, 0.02 / sqrt(2 layers)), biases 0, norm weights 1; the output projection is the
token embedding (tied), so the first loss is about ln(vocab). A generate run's block
matrices are N(0, 2 / sqrt(d)) instead (lm_catalog.init_stds: greedy tokens vary).

Attention (causal always): ``"fused"`` is ``jax.nn.dot_product_attention`` with
``is_causal=True`` (GQA native: key/value heads are not repeated). JAX's default
implementation is XLA's (the same math, fused as XLA sees fit); ``LM.impl = "cudnn"``
asks for cuDNN's flash attention (bf16/fp16 on a GPU: jax_lm_steps.build chooses it
and falls back to XLA's when cuDNN refuses). A decode step, one query against the
cache, passes ``key_value_seq_lengths`` and always takes XLA's implementation. ``"plain"`` is
softmax(Q K^T / sqrt(head dim) + causal mask) V written out with einsum, key/value
heads repeated for GQA.

Generation keeps a key/value cache of static shape: per layer, keys and values of
``(batch, prompt + new, kv_heads, head_dim)`` (compute dtype; one buffer per layer, so
that a layer's attention reads its buffer as it is, not a slice copied out of a
stack). :func:`forward` writes the new positions with ``lax.dynamic_update_slice``.
A decode step reads only the cache's first ``length`` positions (a static slice:
jit needs static shapes, so ``length`` is the :func:`lm_decode.bucket` of the
position, one compiled step per bucket) and masks, within it, those past the
current one (``key_value_seq_lengths``), so its cost grows with the position.
A prefill computes the logits of its last position only (:func:`head` on (B, 1, d)).
"""

import collections
import math

import jax
import jax.numpy as jnp
import lm_catalog
import numpy as np
from jax import lax

INIT_STD = lm_catalog.INIT_STD

LM = collections.namedtuple("LM", "name shape attention dtype impl")
"""A model's static description: catalog name, its ``SHAPES`` dict, ``"fused"`` or
``"plain"``, the compute dtype, and the fused attention's ``implementation`` (None:
JAX's default, XLA; ``"cudnn"``)."""


class HostNormal(object):
    """Initial values drawn with numpy on the host (one generator seeded from ``seed``),
    as jax_layers.HostInit does for the CNNs: no threefry kernel compiled per shape."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(int(seed))

    def normal(self, shape, std):
        values = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        values *= np.float32(std)
        return jnp.asarray(values)

    def full(self, shape, value):
        return jnp.full(tuple(shape), value, jnp.float32)


def _block(s, init, generate):
    d, f = s["d_model"], s["ffn"]
    kv = s["kv_heads"] * (d // s["heads"])
    std, out_std = lm_catalog.init_stds(s, generate)
    if s["family"] == lm_catalog.GPT:
        return {"ln1_w": init.full((d,), 1.0), "ln1_b": init.full((d,), 0.0),
                "qkv_w": init.normal((d, 3 * d), std), "qkv_b": init.full((3 * d,), 0.0),
                "proj_w": init.normal((d, d), out_std), "proj_b": init.full((d,), 0.0),
                "ln2_w": init.full((d,), 1.0), "ln2_b": init.full((d,), 0.0),
                "fc_w": init.normal((d, f), std), "fc_b": init.full((f,), 0.0),
                "out_w": init.normal((f, d), out_std), "out_b": init.full((d,), 0.0)}
    return {"norm1": init.full((d,), 1.0), "wq": init.normal((d, d), std),
            "wk": init.normal((d, kv), std), "wv": init.normal((d, kv), std),
            "wo": init.normal((d, d), out_std), "norm2": init.full((d,), 1.0),
            "gate": init.normal((d, f), std), "up": init.normal((d, f), std),
            "down": init.normal((f, d), out_std)}


def init_params(s, init, generate=False):
    """The parameter tree of shape dict ``s`` drawn with ``init`` (HostNormal; tests: shapes only);
    ``generate``: the generation init of the block matrices (lm_catalog.init_stds)."""
    d = s["d_model"]
    params = {"wte": init.normal((s["vocab"], d), INIT_STD),
              "blocks": [_block(s, init, generate) for _ in range(s["layers"])]}
    if s["family"] == lm_catalog.GPT:
        params["wpe"] = init.normal((s["context"], d), INIT_STD)
        params["lnf_w"], params["lnf_b"] = init.full((d,), 1.0), init.full((d,), 0.0)
    else:
        params["normf"] = init.full((d,), 1.0)
    return params


def describe(name, attention="fused", dtype=jnp.float32, shape=None, impl=None):
    """The :class:`LM` of catalog model ``name`` (``shape``: another shape dict, for tests).

    Raises:
        KeyError: an unknown model. ValueError: an attention other than fused, plain.
    """
    if attention not in ("fused", "plain"):
        raise ValueError("attention %r: expected \"fused\" or \"plain\"" % (attention,))
    return LM(name, dict(shape or lm_catalog.shape(name)), attention, jnp.dtype(dtype), impl)


def param_count(params):
    """Every leaf's size: the model's trainable parameters (arrays or shape structs)."""
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(params))


# layers --------------------------------------------------------------------------------
def _mm(x, w):
    return jnp.dot(x, w.astype(x.dtype))


def _layer_norm(x, w, b):
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    return ((x32 - mean) * lax.rsqrt(var + lm_catalog.LN_EPS) * w + b).astype(x.dtype)


def _rms_norm(x, w):
    x32 = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * lax.rsqrt(ms + lm_catalog.LN_EPS) * w).astype(x.dtype)


def _rope(x, positions, theta):
    """Rotate-half RoPE on ``x`` (B, T, heads, H) at ``positions`` (T,), angles in fp32."""
    half = x.shape[-1] // 2
    inv = 1.0 / (theta ** (np.arange(half, dtype=np.float32) * 2.0 / x.shape[-1]))
    angles = positions.astype(jnp.float32)[:, None] * jnp.asarray(inv)[None, :]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)[None, :, None, :]
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)[None, :, None, :]
    x32 = x.astype(jnp.float32)
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)


def attend(q, k, v, attention, q_positions, kv_len=None, impl=None):
    """Causal attention of ``q`` (B, T, N, H) over ``k``, ``v`` (B, S, K, H).

    ``kv_len`` None: training or prefill, S = T, the query at row i sees keys 0..i.
    Else a decode step: T = 1 and only the first ``kv_len`` keys (a traced scalar)
    are valid. ``q_positions`` (T,) are the queries' positions (the plain mask's rows).
    ``impl``: the fused attention's implementation without a cache length.
    """
    if attention == "fused":
        if kv_len is None:
            return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        lengths = jnp.full((q.shape[0],), kv_len, jnp.int32)
        return jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths)
    groups = q.shape[2] // k.shape[2]
    if groups > 1:
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    scores = jnp.einsum("btnh,bsnh->bnts", q, k).astype(jnp.float32)
    scores = scores * np.float32(1.0 / math.sqrt(q.shape[-1]))
    allowed = jnp.arange(k.shape[1])[None, :] <= q_positions[:, None]
    scores = jnp.where(allowed[None, None], scores, np.float32(-1e30))
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bnts,bsnh->btnh", probs, v)


def _attention(lm, p, x, positions, cache, start, decoding, length=None):
    """One attention sublayer on normed ``x`` (``cache``: this layer's or None); returns
    (output, cache). A decode step reads the cache's first ``length`` positions (a
    static int; None: all of them)."""
    s = lm.shape
    b, t, d = x.shape
    heads, kv_heads = s["heads"], s["kv_heads"]
    hd = d // heads
    if s["family"] == lm_catalog.GPT:
        qkv = _mm(x, p["qkv_w"]) + p["qkv_b"].astype(x.dtype)
        q, k, v = jnp.split(qkv, 3, axis=-1)
    else:
        q, k, v = _mm(x, p["wq"]), _mm(x, p["wk"]), _mm(x, p["wv"])
    q = q.reshape((b, t, heads, hd))
    k = k.reshape((b, t, kv_heads, hd))
    v = v.reshape((b, t, kv_heads, hd))
    if s["family"] == lm_catalog.LLAMA:
        q = _rope(q, positions, s["rope_theta"])
        k = _rope(k, positions, s["rope_theta"])
    kv_len = None
    if cache is not None:
        at = (jnp.int32(0), jnp.asarray(start, jnp.int32), jnp.int32(0), jnp.int32(0))
        cache = {"k": lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), at),
                 "v": lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), at)}
        if decoding:
            k, v = cache["k"], cache["v"]
            if length is not None:
                k, v = k[:, :length], v[:, :length]
            kv_len = start + 1
    out = attend(q, k, v, lm.attention, positions, kv_len, lm.impl).reshape((b, t, d))
    if s["family"] == lm_catalog.GPT:
        return _mm(out, p["proj_w"]) + p["proj_b"].astype(x.dtype), cache
    return _mm(out, p["wo"]), cache


def _mlp(lm, p, x):
    if lm.shape["family"] == lm_catalog.GPT:
        h = jax.nn.gelu(_mm(x, p["fc_w"]) + p["fc_b"].astype(x.dtype), approximate=True)
        return _mm(h, p["out_w"]) + p["out_b"].astype(x.dtype)
    return _mm(jax.nn.silu(_mm(x, p["gate"])) * _mm(x, p["up"]), p["down"])


def head(lm, params, x):
    """The final norm and the (tied) output projection: logits of hidden states ``x``."""
    if lm.shape["family"] == lm_catalog.GPT:
        x = _layer_norm(x, params["lnf_w"], params["lnf_b"])
    else:
        x = _rms_norm(x, params["normf"])
    return jnp.dot(x, params["wte"].T.astype(lm.dtype))


def forward(lm, params, ids, start=0, cache=None, decoding=False, last_only=False,
            length=None):
    """Logits (B, T, vocab) in the compute dtype of token ids (B, T) at ``start`` on.

    Args:
        lm: the :class:`LM`.
        params: its parameter tree.
        ids: int32 token ids.
        start: position of ``ids[:, 0]`` (0, or a traced scalar while decoding).
        cache: None, or a list of one ``{"k", "v"}`` per layer, each (B, S, kv_heads,
            head_dim): the new keys and values are written at ``start`` on.
        decoding: ``ids`` is one token per sequence attending to the cache's first
            ``start + 1`` positions; otherwise ``ids`` attend causally to themselves.
        last_only: logits of the last position only (prefill: B, 1, vocab).
        length: while decoding, the cache positions read (a static int at least
            ``start + 1``: a bucket); None: the whole cache.

    Returns:
        ``(logits, cache)``.
    """
    s, dtype = lm.shape, lm.dtype
    t = ids.shape[1]
    positions = jnp.asarray(start, jnp.int32) + jnp.arange(t, dtype=jnp.int32)
    wte = params["wte"]
    x = jnp.take(wte, ids, axis=0)
    gpt = s["family"] == lm_catalog.GPT
    if gpt:
        x = x + lax.dynamic_slice_in_dim(params["wpe"], jnp.asarray(start, jnp.int32), t, 0)
    x = x.astype(dtype)
    new_cache = None if cache is None else []
    for i, p in enumerate(params["blocks"]):
        h = _layer_norm(x, p["ln1_w"], p["ln1_b"]) if gpt else _rms_norm(x, p["norm1"])
        a, layer_cache = _attention(lm, p, h, positions, None if cache is None else cache[i],
                                    start, decoding, length)
        if cache is not None:
            new_cache.append(layer_cache)
        x = x + a
        h = _layer_norm(x, p["ln2_w"], p["ln2_b"]) if gpt else _rms_norm(x, p["norm2"])
        x = x + _mlp(lm, p, h)
    if last_only:
        x = x[:, -1:]
    return head(lm, params, x), new_cache


def empty_cache(lm, batch, length):
    """A zeroed key/value cache for ``batch`` sequences of ``length`` positions: one
    ``{"k", "v"}`` per layer."""
    s = lm.shape
    shape = (batch, length, s["kv_heads"], s["d_model"] // s["heads"])
    return [{"k": jnp.zeros(shape, lm.dtype), "v": jnp.zeros(shape, lm.dtype)}
            for _ in range(s["layers"])]
