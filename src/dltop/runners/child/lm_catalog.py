"""The transformer models of docs/models.md: shapes, parameter counts and FLOPs.

Standard library only, valid Python 3.6 (child side). ``torch_lm``, ``jax_lm``
and ``tf_lm`` build their decoders from :data:`SHAPES` and nothing else, so the
three frameworks build the same model; the host side (profiles, results)
reads the same table for defaults, limits and the FLOPs formula.

Two families:

- ``gpt``: GPT-2 blocks. Pre-LayerNorm (with bias), learned positions, fused
  QKV projection with bias, GELU (tanh approximation) MLP of ``ffn`` units with
  bias, a final LayerNorm, the output projection tied to the token embedding.
- ``llama``: Llama 3 blocks. Pre-RMSNorm (weight only, eps 1e-5), RoPE on queries
  and keys (theta ``rope_theta``, rotate-half pairing), grouped-query attention
  (``kv_heads`` key/value heads), no biases anywhere, SwiGLU MLP (gate, up,
  down; ``ffn`` units), a final RMSNorm, the output projection tied to the token
  embedding.
"""

GPT = "gpt"
LLAMA = "llama"

SHAPES = {
    # gpt-tiny: small enough that a CPU training step at batch 4 x 128 tokens takes
    # ~0.1-0.2 s on one core; the PTB word vocabulary (10 000), and the output
    # projection does not dominate the step. Real data is text read byte-level
    # (lm_text: ids 0..255, within every vocabulary here).
    "gpt-tiny": dict(family=GPT, layers=4, d_model=128, heads=4, kv_heads=4, ffn=512,
                     vocab=10000, context=256, seq_len=128, rope_theta=None),
    "gpt2-small": dict(family=GPT, layers=12, d_model=768, heads=12, kv_heads=12, ffn=3072,
                       vocab=50257, context=1024, seq_len=1024, rope_theta=None),
    "gpt2-medium": dict(family=GPT, layers=24, d_model=1024, heads=16, kv_heads=16,
                        ffn=4096, vocab=50257, context=1024, seq_len=1024, rope_theta=None),
    # Llama 3.2 1B's shape. RoPE has no fixed limit; dltop caps sequences at 8192.
    "llama-1b": dict(family=LLAMA, layers=16, d_model=2048, heads=32, kv_heads=8, ffn=8192,
                     vocab=128256, context=8192, seq_len=2048, rope_theta=500000.0),
}
"""Each model's shape; ``seq_len`` is the training sequence length a profile gets by
default, ``context`` the longest sequence (training, or prompt + new tokens)."""

NAMES = tuple(SHAPES)
LN_EPS = 1e-5
"""LayerNorm and RMSNorm epsilon, every framework."""
INIT_STD = 0.02
"""Training and inference init (GPT-2's, every framework): weights N(0, 0.02), the
residual output projections (attention out, MLP down) N(0, 0.02 / sqrt(2 layers)),
biases 0, norm weights 1; the first loss is close to ln(vocab)."""
GENERATE_INIT_GAIN = 2.0
"""Generation init of every block matrix: N(0, (GAIN / sqrt(d_model))^2).

Under GPT-2's init the residual stream of an untrained model is its token's embedding
plus blocks' outputs ~50 times smaller, so the tied output projection scores the
input token highest and greedy decoding repeats it (TF: one token 32 times). With
the block matrices at gain 2 / sqrt(d) each sublayer's output is of order one, the
attention scores' spread is about 4 whatever d is, and greedy tokens vary (gpt-tiny:
75-95 % distinct over 32). The shapes and the work are the same, so timing is not
changed by it; the embeddings and norms keep the training init."""
DEFAULT_PROMPT_TOKENS = 128
DEFAULT_NEW_TOKENS = 128


def is_transformer(name):
    return name in SHAPES


def shape(name):
    """The model's shape dict; KeyError naming the transformers for another name."""
    if name not in SHAPES:
        raise KeyError("unknown transformer %r (known: %s)" % (name, ", ".join(NAMES)))
    return SHAPES[name]


def head_dim(name):
    s = shape(name)
    return s["d_model"] // s["heads"]


def init_stds(s, generate=False):
    """``(std, residual std)`` of a block's matrices for shape dict ``s``: GPT-2's
    (:data:`INIT_STD`) for training and inference, :data:`GENERATE_INIT_GAIN` /
    sqrt(d_model) for both in generation."""
    if generate:
        std = GENERATE_INIT_GAIN / (s["d_model"] ** 0.5)
        return std, std
    return INIT_STD, INIT_STD / ((2.0 * s["layers"]) ** 0.5)


def block_params(name):
    """Parameters of one decoder block."""
    s = shape(name)
    d, f = s["d_model"], s["ffn"]
    if s["family"] == GPT:
        # ln1 (2d) + qkv (3d^2 + 3d) + proj (d^2 + d) + ln2 (2d) + fc (d f + f) + proj (f d + d)
        return 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + d * f + f + f * d + d
    kv = s["kv_heads"] * head_dim(name)
    # norm1 (d) + q (d^2) + k, v (d kv each) + o (d^2) + norm2 (d) + gate, up, down (d f each)
    return d + d * d + 2 * d * kv + d * d + d + 3 * d * f


def embedding_params(name):
    """Token embedding (tied with the output projection) plus learned positions, if any."""
    s = shape(name)
    positions = s["context"] * s["d_model"] if s["family"] == GPT else 0
    return s["vocab"] * s["d_model"] + positions


def position_params(name):
    """Learned position embeddings (a lookup: no FLOPs); 0 for RoPE models."""
    s = shape(name)
    return s["context"] * s["d_model"] if s["family"] == GPT else 0


def param_count(name):
    """Every trainable parameter, embeddings included, the tied output projection once."""
    s = shape(name)
    final_norm = 2 * s["d_model"] if s["family"] == GPT else s["d_model"]
    return embedding_params(name) + s["layers"] * block_params(name) + final_norm


NANOGPT = "nanogpt"
NO_EMBEDDING = "no-embedding"
CONVENTIONS = (NANOGPT, NO_EMBEDDING)
"""The FLOPs conventions of MFU: nanoGPT's (the default: every parameter in a matrix
product, the tied embedding included) and torchtitan's (the embedding left out)."""


def flops_params(name, convention=NANOGPT):
    """N of the 6 N term under ``convention``.

    ``nanogpt``: every parameter but the learned positions (a lookup); the tied
    token embedding stays in, since the output projection multiplies by it.
    ``no-embedding``: torchtitan's ``6 * (nparams - nparams_embedding)``, every
    ``nn.Embedding``'s parameters left out; the output projection is tied to the
    token embedding here, so its 2 V d FLOPs per token go with it.
    """
    if convention not in CONVENTIONS:
        raise ValueError("unknown FLOPs convention %r (known: %s)"
                         % (convention, ", ".join(CONVENTIONS)))
    if convention == NO_EMBEDDING:
        return param_count(name) - embedding_params(name)
    return param_count(name) - position_params(name)


def training_flops_per_token(name, seq_len, convention=NANOGPT):
    """Training FLOPs per token: 6 N + 12 L d T (PaLM, appendix B).

    N is :func:`flops_params` under ``convention``. The attention term 12 L d T
    counts the full T x T score and value products (forward 4 L d T, backward
    twice that), not the causal half: as PaLM, nanoGPT, llm.c and torchtitan
    count it (both conventions), so MFU figures compare.
    """
    s = shape(name)
    n = flops_params(name, convention)
    return 6.0 * n + 12.0 * s["layers"] * s["d_model"] * int(seq_len)


def flops_per_token(name, seq_len, mode, convention=NANOGPT):
    """FLOPs per token of a run in ``mode``: training as above, inference its forward
    third (2 N + 4 L d T); None for ``generate`` (decode is bound by memory, not FLOPs)."""
    if mode == "generate":
        return None
    train = training_flops_per_token(name, seq_len, convention)
    return train / 3.0 if mode == "inference" else train


def check_lengths(name, seq_len=None, prompt_tokens=None, new_tokens=None):
    """None, or why the lengths do not fit the model's context (a message)."""
    s = shape(name)
    if seq_len is not None and int(seq_len) > s["context"]:
        return ("seq_len %d is over %s's context of %d tokens"
                % (int(seq_len), name, s["context"]))
    if prompt_tokens is not None and new_tokens is not None \
            and int(prompt_tokens) + int(new_tokens) > s["context"]:
        return ("prompt_tokens + new_tokens = %d is over %s's context of %d tokens"
                % (int(prompt_tokens) + int(new_tokens), name, s["context"]))
    return None


# --- Decode bytes and prefill FLOPs (MBU; docs/metrics.md) -----------------------

BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes of one weight or cache value at a run's precision (tf32 keeps fp32 storage)."""


def kv_bytes_per_position(name, bytes_per_value):
    """Bytes of one position's keys and values in the cache, every layer, one sequence:
    2 L kv_heads head_dim (Llama's grouped keys: kv_heads < heads)."""
    s = shape(name)
    return 2 * s["layers"] * s["kv_heads"] * head_dim(name) * int(bytes_per_value)


def weight_bytes(name, bytes_per_value):
    """Bytes of the weights one decode step reads: every parameter but the learned
    positions, of which a step reads one row per sequence (left out, as the token
    embedding's row lookups: the output projection reads the tied matrix whole)."""
    return (param_count(name) - position_params(name)) * int(bytes_per_value)


def mean_decode_bytes(name, prompt_tokens, new_tokens, batch, bytes_per_value):
    """Mean over a request's decode steps of the bytes one must move (the weights once,
    the cached keys and values of positions 0 .. p-1 read for each of ``batch``
    sequences, the step's own position p written), or None with fewer than 2 new
    tokens. The first new token comes from the prefill; step k = 1 .. new_tokens-1
    feeds the token at position prompt_tokens + k - 1, so the positions run from P to
    P + n - 2 and the mean of position + 1 is P + n / 2."""
    n = int(new_tokens)
    if n < 2:
        return None
    kv = kv_bytes_per_position(name, bytes_per_value) * int(batch)
    return weight_bytes(name, bytes_per_value) + kv * (int(prompt_tokens) + n / 2.0)


def prefill_flops(name, prompt_tokens, batch, convention=NANOGPT):
    """Forward FLOPs of a prefill of ``batch`` prompts of ``prompt_tokens`` tokens.

    Every prompt position goes through the blocks (2 N_blocks per token, N without the
    embedding) and attends over the whole P x P square (4 L d P per token, not halved,
    as the training count); the output projection (2 V d, tied to the embedding) runs
    at the last position only, the one whose logits pick the first token (issue 42:
    equal work in every framework). ``no-embedding`` leaves the output projection out.
    """
    s = shape(name)
    p = int(prompt_tokens)
    per_token = 2.0 * flops_params(name, NO_EMBEDDING) + 4.0 * s["layers"] * s["d_model"] * p
    head = 0.0 if convention == NO_EMBEDDING else 2.0 * s["vocab"] * s["d_model"]
    if convention not in CONVENTIONS:
        flops_params(name, convention)  # raises the unknown convention's error
    return int(batch) * (p * per_token + head)
