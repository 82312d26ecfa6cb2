"""The JAX runner's transformer pieces: spec defaults, the model as a jax_models.Model,
synthetic token batches and the generate loop's jitted prefill and decode.

Child side, valid Python 3.6 syntax. Training and inference reuse jax_runner's step,
placement, optimizers, precision and evaluation unchanged: a transformer is one more
``Model(params, state, apply)`` whose samples are sequences of ``seq_len`` tokens.

Generation (``mode = "generate"``): a prompt of ``prompt_tokens`` uniform random ids
(the spec's seed) for ``per_device_batch`` sequences, then greedy decoding. Jitted
functions, all compiled before the timed loop: :func:`prefill_step` ``(params, cache,
ids) -> (cache, first token, position)`` and :func:`decode_step` ``(params, cache,
token, position) -> (cache, next token, position + 1)``, the latter once per
:func:`lm_decode.buckets` length (the cache positions it reads: jit needs static
shapes), chosen on the host by the request's step. The cache (static shape, prompt +
new positions) is donated to each, so XLA updates it in place; the token and the
position stay on the device between steps, and each step ends with a host read of the
token ids (``np.asarray``), which waits for the device. lm_loop.run_generate times them.
"""

import sys
import time

import convergence
import jax
import jax.numpy as jnp
import jax_lm
import jax_models
import lm_catalog
import lm_decode
import numpy as np


def with_defaults(spec):
    """A copy of ``spec`` whose transformer keys are set: the loader's defaults for None.

    Raises:
        ValueError: a length over the model's context.
    """
    spec = dict(spec)
    name = spec["model"]
    if spec.get("seq_len") is None:
        spec["seq_len"] = lm_catalog.shape(name)["seq_len"]
    spec["attention"] = spec.get("attention") or "fused"
    if spec.get("mode") == "generate":
        if spec.get("prompt_tokens") is None:
            spec["prompt_tokens"] = lm_catalog.DEFAULT_PROMPT_TOKENS
        if spec.get("new_tokens") is None:
            spec["new_tokens"] = lm_catalog.DEFAULT_NEW_TOKENS
    why = lm_catalog.check_lengths(name, spec["seq_len"], spec.get("prompt_tokens"),
                                   spec.get("new_tokens"))
    if why:
        raise ValueError(why)
    return spec


def build(spec, dtype, device):
    """``(LM, jax_models.Model)`` of the spec's transformer, initialised from its seed.

    The fused attention asks for cuDNN's flash kernel where it can exist, a GPU in
    bf16 or fp16 (JAX's default is XLA's implementation, whose causal mask is a
    select over the full T x T scores); :func:`with_fallback` undoes that choice
    when cuDNN refuses at compile time.
    """
    dtype = jnp.dtype(dtype)
    cudnn = (device.platform == "gpu" and spec["attention"] == "fused"
             and dtype in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)))
    lm = jax_lm.describe(spec["model"], spec["attention"], dtype,
                         impl="cudnn" if cudnn else None)
    params = jax_lm.init_params(lm.shape, jax_lm.HostNormal(int(spec["seed"])))
    return lm, as_model(lm, params)


def with_fallback(lm, compile_fn):
    """``(lm, compile_fn(lm))``; if that fails with cuDNN attention, with XLA's instead.

    The compile precedes every step, so nothing has run (or been donated) when it
    fails; the reason is printed to the run's log.
    """
    if lm.impl is None:
        return lm, compile_fn(lm)
    try:
        return lm, compile_fn(lm)
    except Exception as exc:  # cuDNN refuses these shapes, or this jaxlib has no cuDNN
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        sys.stdout.write("[dltop] jax: cuDNN attention not available (%s); XLA's "
                         "attention instead\n" % why)
        sys.stdout.flush()
        lm = lm._replace(impl=None)
        return lm, compile_fn(lm)


def facts(lm):
    """The ``hello`` event's transformer fields: which attention ran."""
    if lm.attention == "plain":
        impl = "plain (einsum, softmax, einsum)"
    else:
        impl = "jax.nn.dot_product_attention (%s)" % (lm.impl or "xla")
    return {"attention_impl": impl}


def as_model(lm, params):
    """``lm`` as a stateless jax_models.Model: ``apply(params, {}, ids, train)``."""
    def apply(params, state, ids, train):
        return jax_lm.forward(lm, params, ids)[0], state

    return jax_models.Model(params, {}, apply)


def synthetic_batch(spec, batch):
    """``(inputs, targets)`` int32 numpy (batch, seq_len): uniform ids in [0, vocab) of
    shape (batch, seq_len + 1) from the spec's seed, targets one token ahead."""
    vocab = lm_catalog.shape(spec["model"])["vocab"]
    rng = np.random.RandomState(int(spec["seed"]))
    ids = rng.randint(0, vocab, (batch, int(spec["seq_len"]) + 1)).astype(np.int32)
    return ids[:, :-1], ids[:, 1:]


def prefill_step(lm, params, cache, ids):
    """The prompt ``ids`` (B, P) into ``cache``; ``(cache, first token (B,), P)``. Only
    the last position reaches the output projection."""
    logits, cache = jax_lm.forward(lm, params, ids, 0, cache, last_only=True)
    token = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)
    return cache, token, jnp.asarray(ids.shape[1], jnp.int32)


def decode_step(lm, params, cache, token, pos, length):
    """One token per sequence at ``pos``, reading the cache's first ``length`` (static)
    positions; ``(cache, next token, pos + 1)``."""
    logits, cache = jax_lm.forward(lm, params, token[:, None], pos, cache, decoding=True,
                                   length=length)
    return cache, jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32), pos + 1


def run_generate(spec, reporter, hello, lm, model, device):
    """Compile prefill and decode, report ``hello``, ``model`` and ``plan``, run the loop.

    Returns:
        The measured request count (lm_loop.run_generate's).
    """
    import lm_loop

    batch = int(spec["per_device_batch"])
    prompt, new = int(spec["prompt_tokens"]), int(spec["new_tokens"])
    rng = np.random.RandomState(int(spec["seed"]))
    ids = jax.device_put(rng.randint(0, lm.shape["vocab"], (batch, prompt)).astype(np.int32),
                         device)
    params = jax.device_put(model.params, device)
    cache = jax.device_put(jax_lm.empty_cache(lm, batch, prompt + new), device)

    token0 = jax.ShapeDtypeStruct((batch,), jnp.int32)
    pos0 = jax.ShapeDtypeStruct((), jnp.int32)
    lengths = lm_decode.buckets(prompt, new)

    def compile_all(lm):
        prefill_j = jax.jit(lambda p, c, x: prefill_step(lm, p, c, x), donate_argnums=(1,))
        steps = {}
        for n in lengths:
            decode_j = jax.jit(lambda p, c, t, k, n=n: decode_step(lm, p, c, t, k, n),
                               donate_argnums=(1,))
            steps[n] = decode_j.lower(params, cache, token0, pos0).compile()
        return prefill_j.lower(params, cache, ids).compile(), steps

    t0 = time.perf_counter()
    lm, (prefill_c, decode_c) = with_fallback(lm, compile_all)
    compile_s = time.perf_counter() - t0
    sys.stdout.write("[dltop] jax: prefill and decode (attended lengths %s, buckets of %d) "
                     "compiled in %.3f s (outside the timed requests)\n"
                     % (", ".join(str(n) for n in lengths) or "none", lm_decode.BUCKET,
                        compile_s))
    sys.stdout.flush()
    more = facts(lm)
    hello(compile_s=compile_s, precision_compute=None if lm.dtype == jnp.float32
          else lm.dtype.name, **more)
    reporter.model(jax_lm.param_count(model.params), None)
    convergence.Plan(None, batch, None, spec["iterations"], spec["warmup"], None).report(reporter)
    holder = {"cache": cache, "token": None, "pos": None, "at": prompt}
    requests = []
    cache_len = prompt + new

    def prefill():
        holder["cache"], holder["token"], holder["pos"] = prefill_c(params, holder["cache"], ids)
        holder["at"] = prompt
        requests.append([np.asarray(holder["token"])])

    def decode():
        step = decode_c[lm_decode.bucket(holder["at"] + 1, cache_len)]
        holder["cache"], holder["token"], holder["pos"] = step(
            params, holder["cache"], holder["token"], holder["pos"])
        holder["at"] += 1
        requests[-1].append(np.asarray(holder["token"]))

    measured = lm_loop.run_generate(spec, reporter, prefill, decode)
    tokens = [np.stack(r, axis=1) for r in requests]
    same = all(np.array_equal(t, tokens[0]) for t in tokens)
    sys.stdout.write("[dltop] jax: greedy tokens of sequence 0: %s; every request the same: "
                     "%s\n" % (" ".join(str(int(t)) for t in tokens[0][0]), same))
    sys.stdout.flush()
    return measured
