"""The TensorFlow runner's transformer runs: spec defaults, token batches, generation.

Valid Python 3.6 (child side). Training and inference reuse tf_runner's loop,
steps (tf_train), loss and evaluation unchanged: only the model (tf_lm), the
batch (:func:`synthetic_batch`: ids of shape (batch, seq_len + 1), inputs
``ids[:, :-1]``, targets ``ids[:, 1:]``) and the samples (tokens) differ.

``mode = "generate"`` (:func:`run_generate`): two ``tf.function``\\ s, compiled
by XLA with the runner's ``xla`` option. The prefill takes the (batch, prompt)
ids, stores every layer's keys and values in the :class:`tf_lm.Cache`
variables (static shape batch x (prompt + new)), samples the first token
(argmax, from the last position's logits only) and sets the cache's position;
the decode step takes one Python int, the cache positions it reads (the
:func:`lm_decode.bucket` of the position): it reads the last token and the
position from variables, writes one key/value row per layer in place
(``scatter_nd_update``), attends over the cache's first ``length`` positions
(those past the token masked), and stores the next token and position. The
decode step is traced (and XLA-compiled) once per bucket, all before the timed
requests; the prefill once. Each returns the token ids, read on the host
(``.numpy()``), which waits for the device; lm_loop.run_generate times them.
"""

import sys
import time

import convergence
import dltop_protocol as proto
import lm_catalog
import lm_decode
import lm_loop
import tensorflow as tf
import tf_lm


def with_defaults(spec):
    """``spec`` with the transformer keys a profile left None set to the model's defaults.

    Raises:
        dltop_protocol.Failed: the lengths do not fit the model's context.
    """
    name = spec["model"]
    out = dict(spec)
    if out.get("seq_len") is None:
        out["seq_len"] = lm_catalog.shape(name)["seq_len"]
    if not out.get("attention"):
        out["attention"] = "fused"
    if out["attention"] not in ("fused", "plain"):
        raise proto.Failed("attention %r: expected \"fused\" or \"plain\"" % out["attention"])
    if out.get("prompt_tokens") is None:
        out["prompt_tokens"] = lm_catalog.DEFAULT_PROMPT_TOKENS
    if out.get("new_tokens") is None:
        out["new_tokens"] = lm_catalog.DEFAULT_NEW_TOKENS
    if out.get("mode") == "generate":
        problem = lm_catalog.check_lengths(name, prompt_tokens=out["prompt_tokens"],
                                           new_tokens=out["new_tokens"])
    else:
        problem = lm_catalog.check_lengths(name, seq_len=out["seq_len"])
    if problem:
        raise proto.Failed(problem)
    return out


def synthetic_batch(spec, batch):
    """``(inputs, targets)`` int32 (batch, seq_len) on the current device: uniform ids in
    [0, vocab) of shape (batch, seq_len + 1) from the spec's seed, targets one ahead."""
    vocab = lm_catalog.shape(spec["model"])["vocab"]
    ids = tf.random.stateless_uniform((batch, int(spec["seq_len"]) + 1),
                                      seed=[int(spec["seed"]), 0], minval=0, maxval=vocab,
                                      dtype=tf.int32)
    return ids[:, :-1], ids[:, 1:]


def generator(model, batch, prompt, new, xla):
    """``(prefill(ids) -> ids, decode(length) -> ids)``: the compiled steps over a fresh
    cache (``length``: the cache positions the step reads, an int)."""
    cache = tf_lm.Cache(model.s, batch, prompt + new, tf.as_dtype(model.compute_dtype))

    def prefill_fn(ids):
        logits = model.run(ids, cache, last_only=True)
        token = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)
        cache.tokens.assign(token)
        cache.pos.assign(prompt)
        return token

    def decode_fn(length):
        pos = cache.pos.read_value()
        logits = model.run(cache.tokens.read_value()[:, None], cache, pos=pos, length=length)
        token = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)
        cache.tokens.assign(token)
        cache.pos.assign(pos + 1)
        return token

    return tf.function(prefill_fn, jit_compile=xla), tf.function(decode_fn, jit_compile=xla)


def prompt_ids(spec, batch, prompt):
    """The synthetic prompt: uniform ids in [0, vocab) from the spec's seed."""
    vocab = lm_catalog.shape(spec["model"])["vocab"]
    return tf.random.stateless_uniform((batch, prompt), seed=[int(spec["seed"]), 1],
                                       minval=0, maxval=vocab, dtype=tf.int32)


def run_generate(spec, reporter, model, device, xla):
    """Compile prefill and decode (one untimed request), report ``plan``, run the loop.

    Returns:
        The measured request count (lm_loop.run_generate's).
    """
    batch = int(spec["per_device_batch"])
    prompt, new = int(spec["prompt_tokens"]), int(spec["new_tokens"])
    with tf.device(device):
        ids = prompt_ids(spec, batch, prompt)
        prefill_c, decode_c = generator(model, batch, prompt, new, xla)
    lengths = lm_decode.buckets(prompt, new)
    t0 = time.perf_counter()
    prefill_c(ids).numpy()
    for n in lengths:  # one step per bucket (fewer than the request's steps: in the cache)
        decode_c(n).numpy()
    sys.stdout.write("[dltop] tensorflow: prefill and decode (attended lengths %s, buckets of "
                     "%d) traced%s in %.3f s (outside the timed requests)\n"
                     % (", ".join(str(n) for n in lengths) or "none", lm_decode.BUCKET,
                        " and XLA-compiled" if xla else "", time.perf_counter() - t0))
    sys.stdout.flush()
    convergence.Plan(None, batch, None, spec["iterations"], spec["warmup"], None).report(reporter)
    requests = []
    at = [prompt]
    cache_len = prompt + new

    def prefill():
        at[0] = prompt
        requests.append([prefill_c(ids).numpy()])

    def decode():
        n = lm_decode.bucket(at[0] + 1, cache_len)
        at[0] += 1
        requests[-1].append(decode_c(n).numpy())

    measured = lm_loop.run_generate(spec, reporter, prefill, decode)
    tokens = [[[int(t[b]) for t in r] for b in range(batch)] for r in requests]
    same = all(t == tokens[0] for t in tokens)
    sys.stdout.write("[dltop] tensorflow: greedy tokens of sequence 0: %s; every request the "
                     "same: %s\n" % (" ".join(str(t) for t in tokens[0][0]) if tokens else "",
                                     same))
    sys.stdout.flush()
    if not same:
        raise proto.Diverged("greedy decoding gave different tokens for the same prompt")
    return measured
