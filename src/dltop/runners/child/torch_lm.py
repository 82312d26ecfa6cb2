"""The transformer decoders of ``lm_catalog`` in PyTorch (child side, valid Python 3.6).

GPT-2 and Llama 3 blocks exactly as :mod:`lm_catalog`'s docstring defines them,
built from :data:`lm_catalog.SHAPES` only. Two layout choices that change no
parameter and no result: Llama's q, k and v projections are one ``Linear`` of
``d + 2 kv`` outputs, and its gate and up projections one ``Linear`` of ``2 ffn``
outputs (one matrix product each instead of three and two: fewer, larger kernels).

Init (every framework): weights normal(0, 0.02), the residual output projections
(attention out, MLP down) normal(0, 0.02 / sqrt(2 layers)), biases 0, norm weights
1, so the first loss is close to ln(vocab).

``attention = "fused"`` is ``F.scaled_dot_product_attention`` (FlashAttention on
bf16/fp16 CUDA; ``enable_gqa`` for Llama's grouped keys where this PyTorch has it);
``"plain"`` is softmax(Q K^T / sqrt(d) + causal mask) V written out.

Generation uses a static key/value cache (:class:`KVCache`, allocated once at
prompt + new tokens): :meth:`Decoder.prefill` fills positions ``[0, P)`` (causal
attention, ``is_causal``) and computes the logits of the last position only, as
JAX and TensorFlow do; :meth:`Decoder.decode` writes position ``pos`` (a device
tensor) with ``index_copy_`` and attends over the cache's first ``length``
positions only (a Python int): eagerly ``pos + 1``, no mask, so a token's cost
grows with its position and SDPA may pick its flash kernels; under compile or
CUDA graphs a :func:`lm_decode.bucket` length with the positions past ``pos``
masked within it (static shapes: one graph per bucket).
"""

import math

import lm_catalog
import torch
import torch.nn as nn
import torch.nn.functional as F

INIT_STD = 0.02
# A C builtin (no inspect.signature): its docstring lists the keyword (PyTorch 2.5+).
_SDPA_GQA = "enable_gqa" in (getattr(F, "scaled_dot_product_attention", None).__doc__ or "")


def attend(q, k, v, fused, causal, mask=None):
    """Attention of ``q`` (B, H, Tq, hd) over ``k``, ``v`` (B, KV, Tk, hd).

    ``causal``: query i sees keys ``<= i`` (Tq == Tk); else ``mask`` (boolean,
    True = attend, broadcast to (B, H, Tq, Tk)) selects the keys.
    """
    heads, kv_heads = q.shape[1], k.shape[1]
    if not causal and heads != kv_heads and q.shape[2] == 1:
        # One decode position: the query heads sharing a key/value head become that
        # head's query rows (the mask is the same for every row), so grouped keys
        # need neither repeating nor SDPA's GQA support (which rules out the fast
        # kernels that take a mask).
        b, _, _, hd = q.shape
        out = attend(q.reshape(b, kv_heads, heads // kv_heads, hd), k, v, fused, False, mask)
        return out.reshape(b, heads, 1, hd)
    if fused:
        if heads == kv_heads:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        if _SDPA_GQA:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  enable_gqa=True)
    if heads != kv_heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    if fused:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(v.dtype)
    return torch.matmul(probs, v)


class KVCache(nn.Module):
    """Keys and values of every layer: (layers, batch, kv_heads, length, head_dim) each."""

    def __init__(self, layers, batch, kv_heads, length, head_dim, dtype, device):
        super(KVCache, self).__init__()
        shape = (layers, batch, kv_heads, length, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("positions", torch.arange(length, device=device),
                             persistent=False)

    def put_prefix(self, layer, k, v):
        t = k.shape[2]
        self.k[layer, :, :, :t].copy_(k)
        self.v[layer, :, :, :t].copy_(v)

    def put(self, layer, pos, k, v, length):
        """Write one position ``pos`` (a 1-element long tensor) of ``layer``; the layer's
        first ``length`` positions (B, KV, length, hd) back: views, nothing copied."""
        kc, vc = self.k[layer], self.v[layer]
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        return kc[:, :, :length], vc[:, :, :length]


def _rms_norm(x, weight):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, lm_catalog.LN_EPS)
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + lm_catalog.LN_EPS)).to(x.dtype) * weight


class RMSNorm(nn.Module):
    def __init__(self, d):
        super(RMSNorm, self).__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return _rms_norm(x, self.weight)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x, cos, sin):
    return x * cos + _rotate_half(x) * sin


class Block(nn.Module):
    """One pre-norm decoder block of either family."""

    def __init__(self, s, fused):
        super(Block, self).__init__()
        d, f = s["d_model"], s["ffn"]
        self.llama = s["family"] == lm_catalog.LLAMA
        self.heads, self.kv_heads = s["heads"], s["kv_heads"]
        self.head_dim = d // s["heads"]
        self.fused = fused
        kv = self.kv_heads * self.head_dim
        if self.llama:
            self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
            self.qkv = nn.Linear(d, d + 2 * kv, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.gate_up = nn.Linear(d, 2 * f, bias=False)
            self.down = nn.Linear(f, d, bias=False)
        else:
            self.norm1 = nn.LayerNorm(d, eps=lm_catalog.LN_EPS)
            self.norm2 = nn.LayerNorm(d, eps=lm_catalog.LN_EPS)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.fc = nn.Linear(d, f)
            self.down = nn.Linear(f, d)

    def _qkv(self, x, rope):
        b, t, _ = x.shape
        kv = self.kv_heads * self.head_dim
        q, k, v = self.qkv(self.norm1(x)).split([self.heads * self.head_dim, kv, kv], dim=-1)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        return q, k, v

    def _finish(self, x, y):
        b, _, t, _ = y.shape
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
        h = self.norm2(x)
        if self.llama:
            gate, up = self.gate_up(h).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)
        return x + self.down(F.gelu(self.fc(h), approximate="tanh"))

    def forward(self, x, rope=None, cache=None, layer=None, pos=None, mask=None,
                length=None):
        """``x`` (B, T, d). With ``cache`` and ``pos`` None: causal attention over ``x``
        (training, inference, prefill: the keys and values go to the cache's prefix);
        with ``pos``: one decode position, attending over the cache's first ``length``
        positions (under ``mask`` where some lie past ``pos``)."""
        q, k, v = self._qkv(x, rope)
        if pos is None:
            if cache is not None:
                cache.put_prefix(layer, k, v)
            return self._finish(x, attend(q, k, v, self.fused, True))
        k, v = cache.put(layer, pos, k, v, length)
        return self._finish(x, attend(q, k, v, self.fused, False, mask))


class Decoder(nn.Module):
    """A GPT-2 or Llama 3 decoder; ``forward(ids)`` gives logits (B, T, vocab)."""

    def __init__(self, name, attention="fused"):
        super(Decoder, self).__init__()
        s = lm_catalog.shape(name)
        self.name, self.shape = name, s
        self.llama = s["family"] == lm_catalog.LLAMA
        d = s["d_model"]
        self.wte = nn.Embedding(s["vocab"], d)
        self.wpe = None if self.llama else nn.Embedding(s["context"], d)
        self.blocks = nn.ModuleList([Block(s, attention != "plain")
                                     for _ in range(s["layers"])])
        self.norm_f = RMSNorm(d) if self.llama else nn.LayerNorm(d, eps=lm_catalog.LN_EPS)
        self.lm_head = nn.Linear(d, s["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one parameter
        if self.llama:
            hd = d // s["heads"]
            inv = 1.0 / (s["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            freqs = torch.outer(torch.arange(s["context"], dtype=torch.float32), inv)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)
        self.cache = None
        self.init_weights()

    def init_weights(self):
        resid = INIT_STD / math.sqrt(2 * self.shape["layers"])
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, INIT_STD)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, (nn.LayerNorm, RMSNorm)):
                nn.init.ones_(mod.weight)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)
        for block in self.blocks:
            nn.init.normal_(block.proj.weight, 0.0, resid)
            nn.init.normal_(block.down.weight, 0.0, resid)

    def _embed(self, ids, positions):
        x = self.wte(ids)
        if self.wpe is not None:
            x = x + self.wpe(positions)
        return x

    def _rope(self, positions):
        if not self.llama:
            return None
        return (self.cos.index_select(0, positions)[None, None],
                self.sin.index_select(0, positions)[None, None])

    def _run(self, ids, positions, cache=None, pos=None, mask=None, length=None,
             last_only=False):
        x = self._embed(ids, positions)
        rope = self._rope(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, cache, i, pos, mask, length)
        if last_only:  # a prefill samples one token: the head's input is (B, 1, d)
            x = x[:, -1:]
        return self.lm_head(self.norm_f(x))

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self._run(ids, positions)

    def new_cache(self, batch, length, dtype, device):
        """Allocate the static key/value cache (``self.cache``) for ``length`` tokens."""
        s = self.shape
        self.cache = KVCache(s["layers"], batch, s["kv_heads"], length,
                             s["d_model"] // s["heads"], dtype, device)
        return self.cache

    def prefill(self, ids):
        """Run the prompt ``ids`` (B, P), filling cache positions [0, P); last logits (B, V)."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self._run(ids, positions, self.cache, last_only=True)[:, -1]

    def decode(self, tok, pos, length, masked=False):
        """One token per sequence, ``tok`` (B, 1) at position ``pos`` (a 1-element long
        device tensor), attending over the cache's first ``length`` positions (an int:
        ``pos + 1``, or with ``masked`` a bucket where those past ``pos`` are masked);
        the logits (B, V)."""
        mask = None
        if masked:
            mask = (self.cache.positions[:length] <= pos).view(1, 1, 1, -1)
        return self._run(tok, pos, self.cache, pos, mask, length)[:, -1]


def build(name, attention="fused", device=None):
    """A freshly initialised decoder, its tensors made directly on ``device``
    (``"meta"``: shapes only, no memory, no init cost)."""
    device = torch.device(device if device is not None else "cpu")
    if not hasattr(device, "__enter__"):  # PyTorch < 2.0: made on the host, then moved
        return Decoder(name, attention or "fused").to(device)
    with device:
        return Decoder(name, attention or "fused")


def param_count(model):
    """Trainable parameters, the tied output projection once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def loss_fn(vocab):
    """Mean cross entropy over every position of every sequence."""
    return lambda logits, y: F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))


def token_batch(name, batch, seq_len, device, generator=None):
    """Uniform random ids (batch, seq_len + 1) on ``device``: inputs ``[:, :-1]`` and
    targets ``[:, 1:]``."""
    ids = torch.randint(0, lm_catalog.shape(name)["vocab"], (batch, int(seq_len) + 1),
                        device=device, generator=generator)
    return ids[:, :-1], ids[:, 1:]
