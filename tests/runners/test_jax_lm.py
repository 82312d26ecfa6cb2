"""The JAX transformers (jax_lm): parameter counts of the four models, fused against
plain attention, the key/value cache against a full forward pass, and the runner's
train, real-data and generate runs of gpt-tiny as child processes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import Shapes, run_runner, spec

pytestmark = pytest.mark.jax

SCRIPT = "jax_runner.py"
GPT_TEST = dict(family="gpt", layers=2, d_model=32, heads=2, kv_heads=2, ffn=64, vocab=97,
                context=32, seq_len=16, rope_theta=None)
LLAMA_TEST = dict(family="llama", layers=2, d_model=64, heads=4, kv_heads=2, ffn=96,
                  vocab=97, context=32, seq_len=16, rope_theta=500000.0)
"""Small shapes of the two families (quick to compile); the Llama one has GQA (2 query
heads per key/value head) and RoPE."""


def lm_spec(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(model="gpt-tiny", framework="jax", optimizer="adamw", lr=3e-4,
                                seq_len=32)
    base.update(kw)
    return spec(**base)


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


@pytest.mark.parametrize("name", ["gpt-tiny", "gpt2-small", "gpt2-medium", "llama-1b"])
def test_parameter_count_equals_the_catalog(name: str) -> None:
    import jax
    import jax.numpy as jnp
    import jax_lm
    import lm_catalog

    lm = jax_lm.describe(name, dtype=jnp.bfloat16)
    params = jax_lm.init_params(lm.shape, Shapes())  # shapes only, nothing allocated
    assert jax_lm.param_count(params) == lm_catalog.param_count(name)
    # the whole forward pass traced abstractly at full size: the tree fits the model
    ids = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    logits, _ = jax.eval_shape(lambda p, x: jax_lm.forward(lm, p, x), params, ids)
    assert (logits.shape, logits.dtype) == ((2, 8, lm.shape["vocab"]), jnp.bfloat16)


def _model(shape: dict[str, Any], attention: str) -> tuple[Any, Any]:
    import jax_lm

    lm = jax_lm.describe("gpt-tiny", attention, shape=shape)
    return lm, jax_lm.init_params(lm.shape, jax_lm.HostNormal(3))


def _forward(lm: Any) -> Any:
    """The whole forward pass jitted (eager JAX compiles every operation apart: slower)."""
    import jax
    import jax_lm

    return jax.jit(lambda p, x: jax_lm.forward(lm, p, x)[0])


@pytest.mark.parametrize("shape", [GPT_TEST, LLAMA_TEST], ids=["gpt", "llama"])
def test_plain_attention_gives_the_fused_logits(shape: dict[str, Any]) -> None:
    fused, params = _model(shape, "fused")
    plain = fused._replace(attention="plain")
    ids = np.random.RandomState(0).randint(0, fused.shape["vocab"], (2, 16)).astype(np.int32)
    run = _forward(fused)
    a = np.asarray(run(params, ids))
    b = np.asarray(_forward(plain)(params, ids))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # causal: changing the last token leaves every earlier position's logits alone
    ids2 = ids.copy()
    ids2[:, -1] = (ids2[:, -1] + 1) % fused.shape["vocab"]
    c = np.asarray(run(params, ids2))
    np.testing.assert_allclose(a[:, :-1], c[:, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[:, -1], c[:, -1])


@pytest.mark.parametrize(("shape", "attention"), [(GPT_TEST, "fused"), (LLAMA_TEST, "fused"),
                                                  (LLAMA_TEST, "plain")],
                         ids=["gpt-fused", "llama-fused", "llama-plain"])
def test_cached_decoding_gives_the_full_forward_logits(shape: dict[str, Any],
                                                        attention: str) -> None:
    import jax
    import jax.numpy as jnp
    import jax_lm
    import lm_decode

    lm, params = _model(shape, attention)
    prompt, new = 5, 4
    ids = np.random.RandomState(1).randint(0, lm.shape["vocab"], (2, prompt + new))
    ids = ids.astype(np.int32)
    full = np.asarray(_forward(lm)(params, ids))
    cache = jax_lm.empty_cache(lm, 2, prompt + new)
    last, cache = jax.jit(lambda p, c, x: jax_lm.forward(lm, p, x, 0, c, last_only=True))(
        params, cache, ids[:, :prompt])
    np.testing.assert_allclose(np.asarray(last)[:, 0], full[:, prompt - 1], rtol=1e-4,
                               atol=1e-5)
    # Each step reads the cache's first `length` positions, buckets of 4 here (8, 8, 8, 9:
    # the last one the whole cache), masked within the bucket.
    step = jax.jit(lambda p, c, t, pos, n: jax_lm.forward(lm, p, t, pos, c, decoding=True,
                                                          length=n),
                   static_argnums=(4,), donate_argnums=(1,))
    for pos in range(prompt, prompt + new):
        length = lm_decode.bucket(pos + 1, prompt + new, 4)
        logits, cache = step(params, cache, ids[:, pos:pos + 1], jnp.int32(pos), length)
        np.testing.assert_allclose(np.asarray(logits)[:, 0], full[:, pos], rtol=1e-4,
                                   atol=1e-5)


def test_cudnn_attention_falls_back_to_xla_when_refused(capsys: pytest.CaptureFixture[str],
                                                        ) -> None:
    import jax
    import jax_lm
    import jax_lm_steps

    lm, params = _model(GPT_TEST, "fused")  # float32: cuDNN's flash attention refuses it
    ids = np.zeros((2, 8), np.int32)

    def compile_fn(lm: Any) -> Any:
        return jax.jit(lambda p, x: jax_lm.forward(lm, p, x)[0]).lower(params, ids).compile()

    used, compiled = jax_lm_steps.with_fallback(lm._replace(impl="cudnn"), compile_fn)
    assert used.impl is None and compiled(params, ids).shape == (2, 8, 97)
    assert "XLA's attention instead" in capsys.readouterr().out
    assert jax_lm_steps.facts(used) == {"attention_impl": "jax.nn.dot_product_attention (xla)"}


def test_a_spec_without_transformer_keys_gets_the_loader_defaults() -> None:
    import jax_lm_steps

    filled = jax_lm_steps.with_defaults(lm_spec(mode="generate", seq_len=None))
    assert (filled["seq_len"], filled["attention"]) == (128, "fused")
    assert (filled["prompt_tokens"], filled["new_tokens"]) == (128, 128)
    with pytest.raises(ValueError, match="seq_len 512 is over gpt-tiny's context of 256"):
        jax_lm_steps.with_defaults(lm_spec(seq_len=512))
    with pytest.raises(ValueError, match="prompt_tokens \\+ new_tokens = 300"):
        jax_lm_steps.with_defaults(lm_spec(mode="generate", prompt_tokens=200, new_tokens=100))


# the runner as a child process ------------------------------------------------------------
def _common(events: list[dict[str, Any]], out: str) -> None:
    import lm_catalog

    assert events[0]["event"] == "hello" and events[-1]["event"] == "done", out
    assert of(events, "model")[0]["param_count"] == lm_catalog.param_count("gpt-tiny")


@pytest.mark.slow
def test_gpt_tiny_trains_on_synthetic_tokens(tmp_path: Path) -> None:
    import lm_catalog

    job = lm_spec(iterations=3, warmup=1, batch_size=2)
    code, events, out = run_runner(tmp_path, job, SCRIPT)
    assert code == 0, out
    _common(events, out)
    assert of(events, "model")[0]["flops_per_sample"] == pytest.approx(
        lm_catalog.flops_per_token("gpt-tiny", 32, "train"))
    iters = of(events, "iter")
    assert len(iters) == 4 and all(e["samples"] == 2 * 32 for e in iters)
    losses = [e["loss"] for e in iters]
    assert all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(10000), abs=0.3)


@pytest.mark.slow
def test_gpt_tiny_trains_on_ptb_and_reports_perplexity(tmp_path: Path) -> None:
    words = [f"w{i % 50}" for i in range(600)]
    (tmp_path / "ptb.train.txt").write_text(" ".join(words) + "\n")
    (tmp_path / "ptb.valid.txt").write_text(" ".join(words[:200]) + "\n")
    job = lm_spec(data="real", data_dir=str(tmp_path), iterations=2, warmup=1, batch_size=2,
                  eval_every=2, attention="plain")
    code, events, out = run_runner(tmp_path, job, SCRIPT)
    assert code == 0, out
    _common(events, out)
    assert all(e["samples"] == 2 * 32 for e in of(events, "iter"))
    evals = of(events, "eval")
    assert evals and evals[-1]["accuracy"] is None
    assert 1.0 < evals[-1]["perplexity"] < 2 * 10000


@pytest.mark.slow
def test_gpt_tiny_generates_with_a_cache(tmp_path: Path) -> None:
    job = lm_spec(mode="generate", prompt_tokens=16, new_tokens=32, batch_size=2,
                  iterations=2, warmup=1, seq_len=None, precision="bf16")
    code, events, out = run_runner(tmp_path, job, SCRIPT)
    assert code == 0, out
    _common(events, out)
    assert of(events, "model")[0]["flops_per_sample"] is None
    hello = events[0]
    assert hello["precision_compute"] == "bfloat16" and "xla" in hello["attention_impl"]
    gens, iters = of(events, "generate"), of(events, "iter")
    assert len(gens) == len(iters) == 3
    for g, it in zip(gens, iters, strict=True):
        assert len(g["itl_s"]) == 31 and it["samples"] == 2 * 32
        assert g["ttft_s"] + sum(g["itl_s"]) == pytest.approx(it["seconds"], rel=0.05)
        # the generation init: greedy tokens vary (GPT-2's init gave 3 distinct of 32)
        assert g["distinct_tokens"] / (2 * 32) > 0.5, g["distinct_tokens"]
    # greedy decoding of one prompt: every request gives the same tokens
    assert "every request the same: True" in out, out
