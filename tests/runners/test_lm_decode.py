"""Decode that scales with position (issue 42 item 2): the attended cache length, the
bucketed (static-shape) step against the exact one, and PyTorch's per-token latency
growing with the position through the real generation loop."""

from __future__ import annotations

import statistics
from typing import Any

import lm_catalog
import lm_decode
import lm_loop
import pytest
import torch
import torch_lm
import torch_lm_steps

from .conftest import Shapes

LLAMA_TEST = dict(family="llama", layers=2, d_model=64, heads=4, kv_heads=2, ffn=96,
                  vocab=500, context=256, seq_len=32, rope_theta=500000.0)
"""Grouped keys and RoPE, a context long enough for several buckets."""

WIDE = dict(family="gpt", layers=2, d_model=128, heads=2, kv_heads=2, ffn=128, vocab=128,
            context=1024, seq_len=64, rope_theta=None)
"""Few parameters (0.3 M) and a long context: at batch 16 the cache a late token reads
(2 layers x 16 sequences x 528 positions x 128 x 2 (keys, values) x 4 bytes, 17 MB)
outweighs the weights (1.3 MB) tenfold, so attention dominates a late step."""


def test_buckets_round_up_and_stop_at_the_cache() -> None:
    assert [lm_decode.bucket(n, 300) for n in (1, 64, 65, 128, 129, 299, 300)] == \
        [64, 64, 128, 128, 192, 300, 300]
    # Decode writes positions 128 .. 254 (prompt 128, 128 new): attended 129 .. 255.
    assert lm_decode.buckets(128, 128) == [192, 256]
    assert lm_decode.buckets(16, 8) == [24]  # the whole (short) cache
    assert lm_decode.buckets(16, 1) == []  # one token: the prefill's only


def _spread(model: torch_lm.Decoder) -> None:
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.blocks.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)


@pytest.mark.parametrize("attention", ["fused", "plain"])
def test_bucketed_decode_gives_the_exact_logits(attention: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # compile and CUDA graphs take the bucketed, masked step; eager the exact one. Both
    # are checked here, eagerly, against one full forward pass over the whole sequence.
    monkeypatch.setitem(lm_catalog.SHAPES, "llama-test", LLAMA_TEST)
    torch.manual_seed(0)
    model = torch_lm.build("llama-test", attention).eval()
    _spread(model)
    total = 140  # the cache; buckets 64, 128, then 140 (capped)
    ids = torch.randint(0, LLAMA_TEST["vocab"], (2, total))
    model.new_cache(2, total, torch.float32, torch.device("cpu"))
    lengths = set()
    with torch.no_grad():
        full = model(ids)
        # Two prompts whose decode steps cross a bucket's end (64, then 128).
        for prompt, last in ((60, 70), (124, 140)):
            first = model.prefill(ids[:, :prompt])
            assert torch.allclose(first, full[:, prompt - 1], atol=3e-6)
            for pos in range(prompt, last):
                at, tok = torch.tensor([pos]), ids[:, pos:pos + 1]
                exact = model.decode(tok, at, pos + 1)
                length = lm_decode.bucket(pos + 1, total)
                lengths.add(length)
                bucketed = model.decode(tok, at, length, masked=True)
                assert torch.allclose(exact, full[:, pos], atol=3e-6), (pos, attention)
                assert torch.allclose(bucketed, exact, atol=3e-6), (pos, attention)
    assert lengths == {64, 128, 140}


def test_compile_and_graphs_choose_the_bucketed_step_and_say_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(lm_catalog.SHAPES, "llama-test", LLAMA_TEST)
    model = torch_lm.build("llama-test")
    s = dict(model="llama-test", per_device_batch=2, prompt_tokens=60, new_tokens=80,
             precision="fp32", seed=3)
    eager = torch_lm_steps.Generator(s, model, torch.device("cpu"))
    assert not eager.static and eager.length(100) == 101 and eager.coverage() is None
    compiled = torch_lm_steps.Generator({**s, "torch_compile": "default"}, model,
                                        torch.device("cpu"))
    assert compiled.static and compiled.length(100) == 128 and compiled.length(138) == 140
    assert compiled.coverage() == (
        "compile default: prefill at its 60 prompt tokens (one shape); decode at 3 attended "
        "lengths (64, 128, 140; buckets of 64, positions past the token masked)")
    # Uncompiled, the bucketed generator still generates the exact generator's tokens.
    first = [eager.prefill()] + [eager.decode() for _ in range(79)]
    assert [compiled.prefill()] + [compiled.decode() for _ in range(79)] == first


def test_eager_decode_gives_sdpa_the_filled_positions_and_no_mask(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(lm_catalog.SHAPES, "llama-test", LLAMA_TEST)
    calls: list[tuple[int, bool, bool]] = []
    sdpa = torch_lm.F.scaled_dot_product_attention

    def spy(q: Any, k: Any, v: Any, attn_mask: Any = None, is_causal: bool = False,
            **kw: Any) -> Any:
        calls.append((k.shape[2], attn_mask is not None, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)

    monkeypatch.setattr(torch_lm.F, "scaled_dot_product_attention", spy)
    s = dict(model="llama-test", per_device_batch=2, prompt_tokens=60, new_tokens=6,
             precision="fp32", seed=3)
    # Eagerly the keys are the filled positions (61, then 62), unmasked; under compile or
    # CUDA graphs the bucket of 64 (of the 66-position cache), masked past the token.
    for static, expected in ((False, [(61, False, False), (62, False, False)]),
                             (True, [(64, True, False), (64, True, False)])):
        gen = torch_lm_steps.Generator({**s, "torch_compile": "default" if static else None},
                                       torch_lm.build("llama-test"), torch.device("cpu"))
        gen.prefill()  # causal over the prompt: is_causal, no mask (2 layers)
        assert calls == [(60, False, True)] * 2
        calls.clear()
        gen.decode()
        gen.decode()
        assert calls[::2] == expected and calls[1::2] == expected  # per layer
        calls.clear()


class _Collect:
    """The reporter calls lm_loop makes, kept."""

    def __init__(self) -> None:
        self.itl: list[list[float]] = []

    def generation(self, i: int, warm: bool, ttft: float, itl: list[float],
                   *rest: Any) -> None:
        self.itl.append(itl)

    def iteration(self, *args: Any, **kw: Any) -> None:
        pass


@pytest.mark.slow  # about 5 s
def test_late_tokens_cost_more_than_early_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before issue 42 every step attended the whole cache under a mask: a flat ITL. One
    # thread (OpenMP's spinning threads on a loaded 2-core machine add tens of ms at
    # random), and each position's fastest of 3 requests, which a burst of load on
    # the machine would have to hit 3 times at the same position to move.
    monkeypatch.setitem(lm_catalog.SHAPES, "wide-test", WIDE)
    torch.manual_seed(0)
    model = torch_lm.build("wide-test")
    s = dict(model="wide-test", per_device_batch=16, prompt_tokens=16, new_tokens=512,
             precision="fp32", seed=0, iterations=3, warmup=0)
    gen = torch_lm_steps.Generator(s, model, torch.device("cpu"))
    reporter = _Collect()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert lm_loop.run_generate(s, reporter, gen.prefill, gen.decode) == 3
    finally:
        torch.set_num_threads(threads)
    fastest = [min(at) for at in zip(*reporter.itl, strict=True)]
    assert len(fastest) == 511
    early, late = statistics.median(fastest[:64]), statistics.median(fastest[-64:])
    print(f"ITL median, first 64 tokens {early * 1e3:.3f} ms, last 64 {late * 1e3:.3f} ms")
    assert late > 1.5 * early, (early, late)  # about 3.4 times on an idle machine


@pytest.mark.jax
def test_jax_decode_step_reads_only_its_bucket_of_the_cache() -> None:
    # The compiled step's matrix products see 64 cache positions, never the 200 of the
    # whole cache (a mask over all of them would make every step cost the same).
    import jax
    import jax.numpy as jnp
    import jax_lm
    import jax_lm_steps

    for attention in ("fused", "plain"):
        lm = jax_lm.describe("gpt-tiny", attention)
        params = jax_lm.init_params(lm.shape, Shapes())
        cache = jax.eval_shape(lambda lm=lm: jax_lm.empty_cache(lm, 2, 200))
        token, pos = jax.ShapeDtypeStruct((2,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32)
        jaxpr = jax.make_jaxpr(lambda p, c, t, n, lm=lm: jax_lm_steps.decode_step(
            lm, p, c, t, n, 64))(params, cache, token, pos)
        seen = set()
        for eqn in _equations(jaxpr.jaxpr):
            if eqn.primitive.name == "dot_general":
                seen.update(tuple(v.aval.shape) for v in eqn.invars)
        keys = (2, 64, 4, 32)  # batch, bucket, key/value heads, head dim
        assert keys in seen, (attention, seen)
        assert not any(200 in shape for shape in seen), (attention, seen)


def _equations(jaxpr: Any) -> Any:
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _subjaxprs(eqn):
            yield from _equations(sub)


def _subjaxprs(eqn: Any) -> list[Any]:
    subs = []
    for value in eqn.params.values():
        inner = getattr(value, "jaxpr", value)
        if hasattr(inner, "eqns"):
            subs.append(inner)
    return subs


@pytest.mark.slow  # TensorFlow's import and a trace
@pytest.mark.tensorflow
def test_tensorflow_decode_step_reads_only_its_bucket_of_the_cache() -> None:
    import tf_lm
    import tf_lm_steps

    _, decode = tf_lm_steps.generator(tf_lm.build("gpt-tiny"), 2, 150, 50, False)
    graph = decode.get_concrete_function(64).graph  # traced for the bucket of 64
    shapes = {tuple(t.shape.as_list()) for op in graph.get_operations()
              if op.type in ("Einsum", "MatMul", "BatchMatMulV2", "BatchMatMulV3")
              for t in op.inputs}
    assert (2, 64, 4, 32) in shapes, shapes  # batch, bucket, key/value heads, head dim
    assert not any(200 in shape for shape in shapes), shapes
