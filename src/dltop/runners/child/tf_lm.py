"""The transformer decoders of docs/models.md in Keras (TensorFlow backend).

Valid Python 3.6 (child side). :class:`Decoder` builds exactly the two
families that ``lm_catalog``'s docstring defines, from ``lm_catalog.SHAPES``:
GPT-2 (pre-LayerNorm with bias, learned positions, fused QKV with bias,
GELU-tanh MLP, final LayerNorm) and Llama 3 (pre-RMSNorm, RoPE rotate-half,
grouped-query attention, SwiGLU, no biases, final RMSNorm); both tie the output
projection to the token embedding. Init (lm_catalog.init_stds): weights N(0, 0.02),
the residual output projections N(0, 0.02 / sqrt(2 layers)), biases 0, norm weights
1; a generate run's block matrices N(0, 2 / sqrt(d)), so that greedy tokens vary.

The weights are plain ``add_weight`` variables read in the Keras compute dtype
(bf16/fp16 under a mixed policy, the variables stay float32); the norms and
the softmax run in float32, as torch's autocast does.

Attention ``"fused"`` is Keras' own ``keras.ops.dot_product_attention``
(grouped-query aware). On the TensorFlow backend that op is the same einsum,
mask and softmax as ``"plain"`` (Keras raises for ``flash_attention`` there):
TF has no fused attention kernel, and XLA (option ``xla``) fuses either.
``"plain"`` writes softmax(Q K^T / sqrt(d) + causal mask) V out here.

One forward serves three uses: training/inference over a whole sequence,
``prefill`` (the prompt; keys and values also written to the cache; the logits of
the last position only) and ``decode`` (one token at a tensor position; attends
over the cache's first ``length`` positions only, a Python int: the
:func:`lm_decode.bucket` of the position, so that a ``tf.function`` (and XLA)
sees static shapes, one trace per bucket; within it the positions past the token
are masked). The cache is :class:`Cache`: ``tf.Variable``\\ s of the static shape
(batch, prompt + new, kv_heads, head_dim), updated in place.
"""

import math

import lm_catalog
import tensorflow as tf

keras = tf.keras


def _normal(std):
    return keras.initializers.RandomNormal(0.0, std)


def _mm(x, w):
    """``x @ w`` over the last axis of a (batch, time, in) tensor."""
    return tf.einsum("bti,io->bto", x, tf.cast(w, x.dtype))


def _layer_norm(x, weight, bias):
    h = tf.cast(x, tf.float32)
    mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
    h = (h - mean) * tf.math.rsqrt(var + lm_catalog.LN_EPS)
    return tf.cast(h * tf.cast(weight, tf.float32) + tf.cast(bias, tf.float32), x.dtype)


def _rms_norm(x, weight):
    h = tf.cast(x, tf.float32)
    h = h * tf.math.rsqrt(tf.reduce_mean(tf.square(h), axis=-1, keepdims=True)
                          + lm_catalog.LN_EPS)
    return tf.cast(h * tf.cast(weight, tf.float32), x.dtype)


def rope_tables(positions, head_dim, theta):
    """cos and sin (len(positions), head_dim), float32, rotate-half layout."""
    inv = 1.0 / tf.pow(float(theta), tf.range(0, head_dim, 2, dtype=tf.float32) / head_dim)
    freqs = tf.cast(positions, tf.float32)[:, None] * inv[None, :]
    emb = tf.concat([freqs, freqs], axis=-1)
    return tf.cos(emb), tf.sin(emb)


def _rope(x, cos, sin):
    # x: (batch, time, heads, head_dim); cos, sin: (time, head_dim).
    half = int(x.shape[-1]) // 2
    rotated = tf.concat([-x[..., half:], x[..., :half]], axis=-1)
    cos = tf.cast(cos, x.dtype)[None, :, None, :]
    sin = tf.cast(sin, x.dtype)[None, :, None, :]
    return x * cos + rotated * sin


def _plain_attention(q, k, v, mask):
    """softmax(Q K^T / sqrt(d) + mask) V spelled out; ``mask`` boolean, broadcast to
    (batch, heads, q_len, k_len)."""
    groups = int(q.shape[2]) // int(k.shape[2])
    if groups > 1:  # grouped-query attention: each key/value head serves ``groups`` heads
        k = tf.repeat(k, groups, axis=2)
        v = tf.repeat(v, groups, axis=2)
    scale = 1.0 / math.sqrt(int(q.shape[-1]))
    scores = tf.cast(tf.einsum("btnh,bsnh->bnts", q, k), tf.float32) * scale
    scores = tf.where(mask, scores, tf.fill(tf.shape(scores), -1e30))
    probs = tf.cast(tf.nn.softmax(scores, axis=-1), v.dtype)
    return tf.einsum("bnts,bsnh->btnh", probs, v)


def _time(x):
    """The length of axis 1: a Python int when static (a traced step), else a tensor."""
    return int(x.shape[1]) if x.shape[1] is not None else tf.shape(x)[1]


def _causal(t):
    return tf.linalg.band_part(tf.ones((t, t), tf.bool), -1, 0)[None, None]


def attend(q, k, v, fused, mask=None):
    """Attention of (batch, time, heads, head_dim) queries over keys/values.

    ``mask`` None: causal over equal lengths; else a boolean (1, 1, q_len, k_len).
    """
    if fused:
        return keras.ops.dot_product_attention(q, k, v, mask=mask, is_causal=mask is None)
    return _plain_attention(q, k, v, _causal(_time(q)) if mask is None else mask)


class Cache(object):
    """Per-layer key and value ``tf.Variable``\\ s (batch, length, kv_heads, head_dim),
    the next write position and the last sampled ids; all updated in place."""

    def __init__(self, shape, batch, length, dtype):
        size = (batch, length, shape["kv_heads"], shape["d_model"] // shape["heads"])
        self.length = length
        self.keys = [tf.Variable(tf.zeros(size, dtype), trainable=False)
                     for _ in range(shape["layers"])]
        self.values = [tf.Variable(tf.zeros(size, dtype), trainable=False)
                       for _ in range(shape["layers"])]
        self.pos = tf.Variable(0, dtype=tf.int32, trainable=False)
        self.tokens = tf.Variable(tf.zeros((batch,), tf.int32), trainable=False)


class Block(keras.layers.Layer):
    """One decoder block of ``shape``'s family."""

    def __init__(self, shape, fused, generate=False, **kwargs):
        super(Block, self).__init__(**kwargs)
        self.s = dict(shape)
        self.fused = fused
        self.generate = generate

    def _w(self, name, dims, init):
        return self.add_weight(shape=dims, initializer=init, name=name)

    def build(self, input_shape=None):
        s = self.s
        d, f = s["d_model"], s["ffn"]
        std, out_std = lm_catalog.init_stds(s, self.generate)
        w, out = _normal(std), _normal(out_std)
        ones, zeros = keras.initializers.Ones(), keras.initializers.Zeros()
        if s["family"] == lm_catalog.GPT:
            self.ln1_w, self.ln1_b = self._w("ln1_w", (d,), ones), self._w("ln1_b", (d,), zeros)
            self.qkv_w, self.qkv_b = self._w("qkv_w", (d, 3 * d), w), self._w("qkv_b", (3 * d,),
                                                                              zeros)
            self.o_w, self.o_b = self._w("o_w", (d, d), out), self._w("o_b", (d,), zeros)
            self.ln2_w, self.ln2_b = self._w("ln2_w", (d,), ones), self._w("ln2_b", (d,), zeros)
            self.fc_w, self.fc_b = self._w("fc_w", (d, f), w), self._w("fc_b", (f,), zeros)
            self.proj_w, self.proj_b = self._w("proj_w", (f, d), out), self._w("proj_b", (d,),
                                                                               zeros)
        else:
            kv = s["kv_heads"] * (d // s["heads"])
            self.norm1 = self._w("norm1", (d,), ones)
            self.q_w, self.k_w = self._w("q_w", (d, d), w), self._w("k_w", (d, kv), w)
            self.v_w, self.o_w = self._w("v_w", (d, kv), w), self._w("o_w", (d, d), out)
            self.norm2 = self._w("norm2", (d,), ones)
            self.gate_w, self.up_w = self._w("gate_w", (d, f), w), self._w("up_w", (d, f), w)
            self.down_w = self._w("down_w", (f, d), out)
        self.built = True

    def _qkv(self, h, rope):
        s = self.s
        b, t, hd = tf.shape(h)[0], _time(h), s["d_model"] // s["heads"]
        if s["family"] == lm_catalog.GPT:
            q, k, v = tf.split(_mm(h, self.qkv_w) + tf.cast(self.qkv_b, h.dtype), 3, axis=-1)
            heads = (s["heads"],) * 3
        else:
            q, k, v = _mm(h, self.q_w), _mm(h, self.k_w), _mm(h, self.v_w)
            heads = (s["heads"], s["kv_heads"], s["kv_heads"])
        q, k, v = [tf.reshape(a, [b, t, n, hd]) for a, n in zip((q, k, v), heads)]  # noqa: B905 - 3.6
        if rope is not None:
            q, k = _rope(q, *rope), _rope(k, *rope)
        return q, k, v

    def forward(self, x, rope=None, cache=None, layer=0, pos=None, length=None):
        """The block on (batch, time, d) ``x``.

        ``cache`` None: causal self-attention over ``x``. ``pos`` None (prefill): also
        writes the keys and values at positions 0..time-1. ``pos`` a scalar tensor
        (decode, time 1): writes them at ``pos`` and attends to positions 0..pos,
        reading the cache's first ``length`` positions (an int > pos; None: all).
        """
        s = self.s
        gpt = s["family"] == lm_catalog.GPT
        h = _layer_norm(x, self.ln1_w, self.ln1_b) if gpt else _rms_norm(x, self.norm1)
        q, k, v = self._qkv(h, rope)
        if cache is None:
            a = attend(q, k, v, self.fused)
        elif pos is None:
            t = int(x.shape[1])
            cache.keys[layer][:, :t].assign(k)
            cache.values[layer][:, :t].assign(v)
            a = attend(q, k, v, self.fused)
        else:
            batch = int(cache.tokens.shape[0])
            at = tf.stack([tf.range(batch), tf.fill([batch], pos)], axis=1)
            cache.keys[layer].scatter_nd_update(at, k[:, 0])
            cache.values[layer].scatter_nd_update(at, v[:, 0])
            n = cache.length if length is None else int(length)
            mask = tf.reshape(tf.range(n) <= pos, [1, 1, 1, n])
            a = attend(q, cache.keys[layer][:, :n], cache.values[layer][:, :n], self.fused,
                       mask)
        a = tf.reshape(a, tf.shape(x))
        if gpt:
            x = x + _mm(a, self.o_w) + tf.cast(self.o_b, x.dtype)
            h = _layer_norm(x, self.ln2_w, self.ln2_b)
            h = tf.nn.gelu(_mm(h, self.fc_w) + tf.cast(self.fc_b, h.dtype), approximate=True)
            return x + _mm(h, self.proj_w) + tf.cast(self.proj_b, x.dtype)
        x = x + _mm(a, self.o_w)
        h = _rms_norm(x, self.norm2)
        return x + _mm(tf.nn.silu(_mm(h, self.gate_w)) * _mm(h, self.up_w), self.down_w)

    def call(self, x):
        return self.forward(x)


class Decoder(keras.Model):
    """The transformer ``name`` of ``lm_catalog``; ``model(ids)`` gives (batch, time, vocab)
    logits in the compute dtype."""

    def __init__(self, name, attention="fused", shape=None, generate=False, **kwargs):
        super(Decoder, self).__init__(**kwargs)
        # ``shape``: a smaller shape of the same keys (tests of the llama family).
        self.s = dict(shape or lm_catalog.shape(name))
        self.gpt = self.s["family"] == lm_catalog.GPT
        self.blocks = [Block(self.s, attention == "fused", generate, name="block%d" % i)
                       for i in range(self.s["layers"])]

    def build(self, input_shape=None):
        s = self.s
        d = s["d_model"]
        ones, std = keras.initializers.Ones(), lm_catalog.INIT_STD
        self.wte = self.add_weight(shape=(s["vocab"], d), initializer=_normal(std), name="wte")
        if self.gpt:
            self.wpe = self.add_weight(shape=(s["context"], d), initializer=_normal(std),
                                       name="wpe")
            self.lnf_w = self.add_weight(shape=(d,), initializer=ones, name="lnf_w")
            self.lnf_b = self.add_weight(shape=(d,), initializer="zeros", name="lnf_b")
        else:
            self.normf = self.add_weight(shape=(d,), initializer=ones, name="normf")
        for block in self.blocks:
            block.build(None)
        self.built = True

    def _dtype(self):
        return tf.as_dtype(self.compute_dtype)

    def _embed(self, ids, positions):
        x = tf.gather(tf.cast(self.wte, self._dtype()), ids)
        if self.gpt:
            x = x + tf.gather(tf.cast(self.wpe, self._dtype()), positions)[None]
        return x

    def _rope(self, positions):
        if self.gpt:
            return None
        return rope_tables(positions, self.s["d_model"] // self.s["heads"], self.s["rope_theta"])

    def _logits(self, x):
        x = (_layer_norm(x, self.lnf_w, self.lnf_b) if self.gpt else _rms_norm(x, self.normf))
        return tf.einsum("btd,vd->btv", x, tf.cast(self.wte, x.dtype))  # tied output

    def run(self, ids, cache=None, pos=None, last_only=False, length=None):
        """Logits of (batch, time) ``ids``: a whole sequence from position 0 (``pos``
        None; with ``cache``, its keys and values are stored), or one token per sequence
        at the scalar tensor ``pos`` through ``cache``, reading its first ``length``
        positions (None: all). ``last_only``: the last position's logits only (a
        prefill samples one token: the output projection sees (batch, 1, d))."""
        t = _time(ids)
        positions = tf.range(t) if pos is None else tf.reshape(pos, [1])
        x = self._embed(ids, positions)
        rope = self._rope(positions)
        for i, block in enumerate(self.blocks):
            x = block.forward(x, rope, cache, i, pos, length)
        return self._logits(x[:, -1:] if last_only else x)

    def call(self, ids, training=None):
        return self.run(ids)


def build(name, attention="fused", generate=False):
    """A freshly initialised :class:`Decoder` (variables created under the current
    device or strategy scope); ``generate``: the generation init."""
    model = Decoder(name, attention or "fused", generate=generate)
    model.build(None)
    return model


def param_count(model):
    n = 0
    for v in model.trainable_variables:
        size = 1
        for dim in v.shape:
            size *= int(dim)
        n += size
    return n
