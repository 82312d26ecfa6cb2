"""Equal prefill work in every framework (issue 42 item 1): the runner's own prefill
step sends the last prompt position only through the final norm and the output
projection, a (batch, 1, d) input, in PyTorch, JAX and TensorFlow alike (a decode
step's is (batch, 1, d) too). PyTorch's used to take every position: 44 % more
prefill FLOPs on gpt2-small at 128 prompt tokens, and a batch x prompt x vocab tensor."""

from __future__ import annotations

from typing import Any

import lm_catalog
import lm_decode
import pytest

from .conftest import LazyModule, Shapes

tf = LazyModule("tensorflow")

BATCH, PROMPT, NEW = 3, 20, 4
HEAD_INPUT = (BATCH, 1, lm_catalog.shape("gpt-tiny")["d_model"])
"""What every framework's prefill and decode must give the output projection."""


def test_torch_prefill_projects_the_last_position_only() -> None:
    import torch
    import torch_lm
    import torch_lm_steps

    model = torch_lm.build("gpt-tiny")
    seen: list[tuple[int, ...]] = []
    model.lm_head.register_forward_pre_hook(lambda mod, args: seen.append(tuple(args[0].shape)))
    gen = torch_lm_steps.Generator(dict(model="gpt-tiny", per_device_batch=BATCH,
                                        prompt_tokens=PROMPT, new_tokens=NEW,
                                        precision="fp32", seed=0), model, torch.device("cpu"))
    gen.prefill()
    assert seen == [HEAD_INPUT]
    gen.decode()
    assert seen == [HEAD_INPUT] * 2


@pytest.mark.jax
def test_jax_prefill_projects_the_last_position_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax
    import jax.numpy as jnp
    import jax_lm
    import jax_lm_steps

    seen: list[tuple[int, ...]] = []
    head = jax_lm.head

    def spy(lm: Any, params: Any, x: Any) -> Any:
        seen.append(tuple(x.shape))  # while tracing: the compiled graph's shape
        return head(lm, params, x)

    monkeypatch.setattr(jax_lm, "head", spy)
    lm = jax_lm.describe("gpt-tiny")
    params = jax_lm.init_params(lm.shape, Shapes())  # shapes only
    cache = jax.eval_shape(lambda: jax_lm.empty_cache(lm, BATCH, PROMPT + NEW))
    ids = jax.ShapeDtypeStruct((BATCH, PROMPT), jnp.int32)
    cache, token, pos = jax.eval_shape(
        lambda p, c, x: jax_lm_steps.prefill_step(lm, p, c, x), params, cache, ids)
    assert seen == [HEAD_INPUT] and token.shape == (BATCH,)
    (length,) = lm_decode.buckets(PROMPT, NEW)
    jax.eval_shape(lambda p, c, t, n: jax_lm_steps.decode_step(lm, p, c, t, n, length),
                   params, cache, token, pos)
    assert seen == [HEAD_INPUT] * 2


@pytest.mark.slow  # TensorFlow's import and tracing
@pytest.mark.tensorflow
def test_tensorflow_prefill_projects_the_last_position_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tf_lm
    import tf_lm_steps

    model = tf_lm.build("gpt-tiny")
    seen: list[tuple[int, ...]] = []
    logits = model._logits

    def spy(x: Any) -> Any:
        seen.append(tuple(x.shape))  # static while tracing
        return logits(x)

    monkeypatch.setattr(model, "_logits", spy)
    prefill, decode = tf_lm_steps.generator(model, BATCH, PROMPT, NEW, False)
    prefill(tf_lm_steps.prompt_ids({"model": "gpt-tiny", "seed": 0}, BATCH, PROMPT))
    assert seen == [HEAD_INPUT]
    decode(lm_decode.bucket(PROMPT + 1, PROMPT + NEW))
    assert seen == [HEAD_INPUT] * 2
