"""The PyTorch transformers: parameter counts, attention paths, the KV-cached generation,
and gpt-tiny runs of the real runner (train, real data with perplexity, generate)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lm_catalog
import pytest
import torch
import torch_lm
import torch_lm_steps
import torch_optim

from .conftest import run_runner, spec

LLAMA_TEST = dict(family="llama", layers=2, d_model=64, heads=4, kv_heads=2, ffn=96,
                  vocab=500, context=64, seq_len=32, rope_theta=500000.0)
"""A small Llama-family shape (grouped keys, RoPE) for in-process tests."""


@pytest.fixture
def llama_test(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(lm_catalog.SHAPES, "llama-test", LLAMA_TEST)
    return "llama-test"


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
@pytest.mark.parametrize("name", lm_catalog.NAMES)
def test_parameter_count_equals_the_catalog(name: str) -> None:
    model = torch_lm.build(name, device="meta")  # shapes only: no memory, no init
    assert torch_lm.param_count(model) == lm_catalog.param_count(name)
    assert model.lm_head.weight is model.wte.weight


def test_the_published_gpt2_counts() -> None:
    assert lm_catalog.param_count("gpt2-small") == 124_439_808
    assert lm_catalog.param_count("gpt2-medium") == 354_823_168


@pytest.mark.parametrize("name", ["gpt-tiny", "llama-test"])
def test_plain_attention_gives_the_fused_logits(name: str, llama_test: str) -> None:
    torch.manual_seed(0)
    fused = torch_lm.build(name, "fused").eval()
    plain = torch_lm.build(name, "plain").eval()
    plain.load_state_dict(fused.state_dict())
    x, _ = torch_lm.token_batch(name, 2, 24, "cpu")
    with torch.no_grad():
        a, b = fused(x), plain(x)
    assert a.shape == (2, 24, lm_catalog.shape(name)["vocab"])
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), (a - b).abs().max()


def test_causal_attention_ignores_later_tokens(llama_test: str) -> None:
    torch.manual_seed(0)
    model = torch_lm.build(llama_test).eval()
    x, _ = torch_lm.token_batch(llama_test, 1, 16, "cpu")
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % LLAMA_TEST["vocab"]
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-6)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_init_gives_a_first_loss_near_ln_vocab() -> None:
    torch.manual_seed(0)
    model = torch_lm.build("gpt-tiny")
    x, y = torch_lm.token_batch("gpt-tiny", 4, 64, "cpu")
    with torch.no_grad():
        loss = torch_lm.loss_fn(10000)(model(x), y).item()
    assert abs(loss - math.log(10000)) < 0.1
    assert model.blocks[0].down.weight.std().item() == pytest.approx(
        0.02 / math.sqrt(2 * 4), rel=0.1)


def _spread(model: torch_lm.Decoder) -> None:
    # Larger block matrices than the init's, so that the blocks outweigh the tied
    # embedding and greedy decoding does not just repeat its input token.
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.blocks.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)


@pytest.mark.parametrize(("name", "attention"), [
    ("gpt-tiny", "fused"), ("llama-test", "fused"), ("llama-test", "plain")])
def test_kv_cached_generation_equals_greedy_recomputation(name: str, attention: str,
                                                          llama_test: str) -> None:
    torch.manual_seed(0)
    model = torch_lm.build(name, attention)
    _spread(model)
    s = dict(model=name, per_device_batch=2, prompt_tokens=12, new_tokens=6,
             precision="fp32", seed=3)
    gen = torch_lm_steps.Generator(s, model, torch.device("cpu"))
    first = gen.prefill()
    rest = [gen.decode() for _ in range(5)]
    ids, expected = gen.prompt, []
    with torch.no_grad():
        for _ in range(6):
            nxt = model(ids)[:, -1].argmax(-1)
            expected.append(nxt.tolist())
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    assert [first, *rest] == expected
    assert len({t for step in expected for t in step}) > 3  # not one repeated token
    again = [gen.prefill()] + [gen.decode() for _ in range(5)]  # the cache is reset
    assert again == expected


def test_defaults_fill_what_the_spec_leaves_none() -> None:
    s = torch_lm_steps.with_defaults({"model": "gpt2-small", "mode": "generate",
                                      "seq_len": None, "attention": None,
                                      "prompt_tokens": None, "new_tokens": None})
    assert (s["seq_len"], s["attention"], s["prompt_tokens"], s["new_tokens"]) == \
        (1024, "fused", 128, 128)
    with pytest.raises(Exception, match="over gpt-tiny's context of 256"):
        torch_lm_steps.with_defaults({"model": "gpt-tiny", "seq_len": 512})


def test_cuda_graphs_may_capture_fp16_decoding() -> None:
    import torch_gpu

    # No loss scaler in generation: only training's fp16 refusal applies to training.
    torch_gpu.check(spec("gpt-tiny", mode="generate", cuda_graphs=True, precision="fp16"),
                    torch.device("cuda", 0), 1)
    with pytest.raises(Exception, match="needs a CUDA GPU"):
        torch_gpu.check(spec("gpt-tiny", mode="generate", cuda_graphs=True),
                        torch.device("cpu"), 1)


def test_adamw_is_fused_on_cuda_only_and_unchanged_on_cpu() -> None:
    p = [torch.nn.Parameter(torch.zeros(3))]
    opt = torch_optim.build({"optimizer": "adamw", "lr": 1e-3}, p, torch.device("cpu"))
    assert not opt.param_groups[0].get("fused")
    assert opt.param_groups[0]["weight_decay"] == 0.0


def _events(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


@pytest.mark.slow
def test_gpt_tiny_trains_with_tokens_as_samples(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec(
        "gpt-tiny", seq_len=32, optimizer="adamw", lr=3e-4, iterations=3, warmup=1,
        op_profile=True))
    assert code == 0, out
    (model,) = _events(events, "model")
    assert model["param_count"] == lm_catalog.param_count("gpt-tiny")
    assert model["flops_per_sample"] == lm_catalog.flops_per_token("gpt-tiny", 32, "train")
    iters = _events(events, "iter")
    assert [e["samples"] for e in iters] == [4 * 32] * 4
    assert abs(iters[0]["loss"] - math.log(10000)) < 0.15
    assert iters[-1]["loss"] < iters[0]["loss"]  # AdamW at 3e-4 learns the fixed batch
    (prof,) = _events(events, "profile")  # profile = true: 5 extra steps, not iterations
    assert any(op["name"] == "aten::mm" or op["name"] == "aten::addmm" for op in prof["ops"])


@pytest.mark.slow
def test_gpt_tiny_inference_counts_tokens_and_forward_flops(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec(
        "gpt-tiny", mode="inference", batch_size=2, iterations=2, warmup=1))
    assert code == 0, out
    (model,) = _events(events, "model")
    assert model["flops_per_sample"] == pytest.approx(
        lm_catalog.flops_per_token("gpt-tiny", 128, "train") / 3)  # the default seq_len
    iters = _events(events, "iter")
    assert [(e["samples"], e["loss"]) for e in iters] == [(2 * 128, None)] * 3


@pytest.mark.slow
def test_gpt_tiny_trains_on_ptb_and_reports_perplexity(tmp_path: Path) -> None:
    words = " ".join(f"w{(i * 7) % 50}" for i in range(600))
    (tmp_path / "ptb.train.txt").write_text(words + "\n")
    (tmp_path / "ptb.valid.txt").write_text(words[:800] + "\n")
    code, events, out = run_runner(tmp_path, spec(
        "gpt-tiny", seq_len=16, data="real", data_dir=str(tmp_path), optimizer="adamw",
        lr=1e-3, iterations=4, warmup=0, eval_every=2))
    assert code == 0, out
    assert [e["samples"] for e in _events(events, "iter")] == [4 * 16] * 4
    evals = _events(events, "eval")
    assert [e["index"] for e in evals] == [1, 3]
    for ev in evals:
        assert ev["accuracy"] is None
        assert 1.0 < ev["perplexity"] < 10000 * 1.5
        assert ev["perplexity"] == pytest.approx(math.exp(ev["loss"]), rel=1e-6)
    assert evals[1]["perplexity"] < evals[0]["perplexity"]  # 50 repeating words: learnt


@pytest.mark.slow
def test_gpt_tiny_generates_with_a_timed_kv_cache(tmp_path: Path) -> None:
    code, events, out = run_runner(tmp_path, spec(
        "gpt-tiny", mode="generate", batch_size=2, prompt_tokens=16, new_tokens=8,
        iterations=2, warmup=1))
    assert code == 0, out
    (model,) = _events(events, "model")
    assert model["flops_per_sample"] is None
    gens, iters = _events(events, "generate"), _events(events, "iter")
    assert len(gens) == len(iters) == 3
    for g, it in zip(gens, iters, strict=True):
        assert len(g["itl_s"]) == 7 and g["batch"] == 2 and g["new_tokens"] == 8
        assert it["samples"] == 2 * 8
        assert g["ttft_s"] + sum(g["itl_s"]) == pytest.approx(it["seconds"], rel=0.05)
    assert [e["iterations"] for e in _events(events, "done")] == [2]


class _Quiet:
    def emit(self, event: str, **fields: Any) -> None:
        pass


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
@pytest.mark.parametrize(("name", "prompt", "new"), [("gpt-tiny", 12, 6), ("llama-test", 12, 6),
                                                     ("gpt-tiny", 60, 10)])
def test_cuda_graph_decoding_gives_the_eager_tokens(name: str, prompt: int, new: int,
                                                    llama_test: str) -> None:
    import lm_decode

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = torch_lm.build(name, "fused", dev)
    _spread(model)
    s = dict(model=name, per_device_batch=2, prompt_tokens=prompt, new_tokens=new,
             precision="fp32", seed=3, cuda_graphs=True)
    graphed = torch_lm_steps.Generator(s, model, dev)
    graphed.prepare(_Quiet())
    assert "capture_s" in graphed.setup_s
    # The prefill is a graph too, and each bucket (64 and 70 for 60 + 10) has its own.
    assert graphed._replay_prefill is not None
    assert sorted(graphed._replays) == lm_decode.buckets(prompt, new)
    tokens = [[graphed.prefill()] + [graphed.decode() for _ in range(new - 1)]
              for _ in range(2)]
    eager = torch_lm_steps.Generator({**s, "cuda_graphs": False}, model, dev)
    assert tokens[0] == tokens[1] == \
        [eager.prefill()] + [eager.decode() for _ in range(new - 1)]
