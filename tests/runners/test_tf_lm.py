"""The TensorFlow transformers: parameter counts, attention paths, the KV cache, and
gpt-tiny runs (train, real data with evaluation, generate) as real child processes."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dltop.runners.child import lm_catalog, lm_decode

from .conftest import run_runner, spec

try:
    import tensorflow as tf

    from dltop.runners.child import tf_lm_steps
except ImportError:  # the `tensorflow` marker fails each test with how to install it
    tf = tf_lm_steps = None

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow]

SCRIPT = "tf_runner.py"
# A llama-family shape small enough for a unit test (GQA: 2 key/value heads for 4).
LLAMA_TINY = dict(family="llama", layers=2, d_model=64, heads=4, kv_heads=2, ffn=96,
                  vocab=101, context=64, seq_len=32, rope_theta=500000.0)


def tf_spec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(framework="tensorflow", optimizer="adamw", lr=3e-4,
                                batch_size=2, iterations=2, warmup=1, seq_len=32)
    base.update(kw)
    return spec("gpt-tiny", "cpu:1", **base)


def decoder(shape: dict[str, Any] | None, attention: str = "fused") -> Any:
    tf.keras.utils.set_random_seed(0)
    model = tf_lm_steps.tf_lm.Decoder("gpt-tiny", attention, shape=shape)
    model.build(None)
    return model


def count_params(name: str) -> int:
    """The trainable parameter count of ``name``'s Keras model, without allocating it.

    Under ``keras.StatelessScope`` Keras creates each variable with its shape and
    defers the initialiser, so llama-1b's 1.2 billion parameters cost nothing.
    """
    with tf.keras.StatelessScope(initialize_variables=False):
        model = tf_lm_steps.tf_lm.Decoder(name)
        model.build(None)
        count = int(tf_lm_steps.tf_lm.param_count(model))
    # Keras keeps deferred variables in a global list that the next StatelessScope
    # to exit initialises: drop these, or a later scope would allocate them all.
    from keras.src.backend.common import global_state

    pending = global_state.get_global_attribute("uninitialized_variables")
    if pending:
        ours = {id(v) for v in model.variables}
        pending[:] = [v for v in pending if id(v) not in ours]
    return count


@pytest.mark.parametrize("name", lm_catalog.NAMES)
def test_parameter_count_equals_lm_catalog(name: str) -> None:
    assert count_params(name) == lm_catalog.param_count(name)


def test_built_gpt_tiny_counts_the_same_and_starts_at_uniform_loss() -> None:
    model = decoder(None)
    assert tf_lm_steps.tf_lm.param_count(model) == lm_catalog.param_count("gpt-tiny")
    ids = tf.random.stateless_uniform((2, 33), seed=[0, 0], minval=0, maxval=10000,
                                      dtype=tf.int32)
    logits = model(ids[:, :-1])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(ids[:, 1:], logits))
    assert float(loss) == pytest.approx(math.log(10000), abs=0.1)


@pytest.mark.parametrize("shape", [None, LLAMA_TINY], ids=["gpt", "llama"])
def test_plain_attention_gives_the_fused_logits(shape: dict[str, Any] | None) -> None:
    fused, plain = decoder(shape, "fused"), decoder(shape, "plain")
    plain.set_weights(fused.get_weights())
    vocab = fused.s["vocab"]
    ids = tf.random.stateless_uniform((2, 24), seed=[3, 4], minval=0, maxval=vocab,
                                      dtype=tf.int32)
    a, b = fused(ids).numpy(), plain(ids).numpy()
    assert a.shape == (2, 24, vocab) and a.std() > 0.01
    np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("attention", ["fused", "plain"])
@pytest.mark.parametrize("shape", [None, LLAMA_TINY], ids=["gpt", "llama"])
def test_cached_decode_reproduces_the_full_forward(shape: dict[str, Any] | None,
                                                   attention: str) -> None:
    # Prefill 10 tokens, then decode 6 more one at a time through the cache: the logits
    # at every position must be those of one forward pass over all 16.
    model = decoder(shape, attention)
    ids = tf.random.stateless_uniform((2, 16), seed=[5, 6], minval=0, maxval=model.s["vocab"],
                                      dtype=tf.int32)
    full = model(ids).numpy()
    cache = tf_lm_steps.tf_lm.Cache(model.s, 2, 16, tf.float32)
    got = [model.run(ids[:, :10], cache, last_only=True).numpy()[:, 0]]
    for t in range(10, 15):  # reading the first 12 cache positions, then all 16
        length = lm_decode.bucket(t + 1, 16, 4)
        got.append(model.run(ids[:, t:t + 1], cache, pos=tf.constant(t),
                             length=length).numpy()[:, 0])
    np.testing.assert_allclose(np.stack(got, axis=1), full[:, 9:15], atol=1e-4)


def test_gpt_tiny_training_run_counts_tokens(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, tf_spec(), script=SCRIPT)
    assert code == 0, out
    assert [e["event"] for e in events] == ["hello", "model", "plan", "iter", "iter", "iter",
                                            "done"]
    model = events[1]
    assert model["param_count"] == lm_catalog.param_count("gpt-tiny")
    assert model["flops_per_sample"] == lm_catalog.flops_per_token("gpt-tiny", 32, "train")
    iters = [e for e in events if e["event"] == "iter"]
    assert all(e["samples"] == 2 * 32 and e["seconds"] > 0 for e in iters)
    assert abs(iters[0]["loss"] - math.log(10000)) < 0.2
    assert all(math.isfinite(e["loss"]) for e in iters)


def test_gpt_tiny_real_ptb_run_evaluates_perplexity(tmp_path: Path) -> None:
    words = " ".join(f"w{i * 7 % 50}" for i in range(400))
    (tmp_path / "ptb.train.txt").write_text(words + "\n")
    # 150 words, 570 bytes (byte-level ids): 35 windows of 16, so the last evaluation
    # batch (3 of 4) is shorter and the eval step retraces with a relaxed shape.
    (tmp_path / "ptb.valid.txt").write_text(" ".join(words.split()[:150]) + "\n")
    job = tf_spec(data="real", data_dir=str(tmp_path), seq_len=16, batch_size=4,
                  iterations=3, warmup=0, eval_every=3)
    code, events, out = run_runner(tmp_path, job, script=SCRIPT)
    assert code == 0, out
    iters = [e for e in events if e["event"] == "iter"]
    assert len(iters) == 3 and all(e["samples"] == 4 * 16 for e in iters)
    evals = [e for e in events if e["event"] == "eval"]
    assert len(evals) == 1, events
    assert evals[0]["perplexity"] == pytest.approx(math.exp(evals[0]["loss"]), rel=1e-6)
    # A near-uniform start over 10 000 ids, already pulled down towards the 50 words seen.
    assert 50 < evals[0]["perplexity"] < 10000 * 1.5


def test_gpt_tiny_generate_times_every_token(tmp_path: Path) -> None:
    job = tf_spec(mode="generate", prompt_tokens=16, new_tokens=32, seq_len=None)
    code, events, out = run_runner(tmp_path, job, script=SCRIPT)
    assert code == 0, out
    assert events[1]["event"] == "model" and events[1]["flops_per_sample"] is None
    gens = [e for e in events if e["event"] == "generate"]
    iters = [e for e in events if e["event"] == "iter"]
    assert len(gens) == len(iters) == 3
    for g, it in zip(gens, iters, strict=True):
        assert len(g["itl_s"]) == 31 and g["ttft_s"] > 0
        assert g["ttft_s"] + sum(g["itl_s"]) == pytest.approx(it["seconds"], rel=0.05)
        assert it["samples"] == 2 * 32
        # the generation init: greedy tokens vary (GPT-2's init gave one token 32 times)
        assert g["distinct_tokens"] / (2 * 32) > 0.5, g["distinct_tokens"]
    found = re.search(r"greedy tokens of sequence 0: ([\d ]+); every request the same: (\w+)",
                      out)
    assert found and found.group(2) == "True", out
    seq0 = found.group(1).split()
    assert len(seq0) == 32 and len(set(seq0)) > 0.5 * 32
