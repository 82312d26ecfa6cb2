"""Profile settings of the transformer models: their defaults and their limits.

The shapes come from the runners' own table, ``runners/child/lm_catalog.py``
(standard library only), loaded from its file: the host does not import child
modules as a package, and one table serves both sides, so a default sequence
length or a context limit cannot differ between the loader and the runners.
See docs/profiles.md ("Transformer models") for the keys and docs/models.md for
the shapes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any, Final

from dltop import catalog
from dltop.childfiles import child_module
from dltop.errors import UserError
from dltop.profiles.device import DeviceSpec
from dltop.profiles.fields import GROUP, MODES
from dltop.profiles.jobspec import declared, settings

Err = Callable[[str, str], UserError]
Loc = Callable[[str], str]

LM_KEYS: Final = declared(GROUP, "lm")
"""Settings only the transformer models take (``setting(group="lm")``)."""
GENERATE_KEYS: Final = tuple(k for k in declared(MODES)
                             if "train" not in settings()[k].metadata[MODES])
"""Settings of the request modes only (``setting(modes=...)`` without ``train``): the
generation request's."""
ADAMW_DEFAULTS: Final = {"optimizer": "adamw", "lr": 6e-4, "weight_decay": 0.1}
"""A transformer's update rule when the profile names none: AdamW with nanoGPT's GPT-2
learning rate and weight decay (each only where the profile leaves it unset)."""
ATTENTION_DEFAULT: Final = "fused"


def _text() -> ModuleType:
    return child_module("lm_text")


def text_problem(data_dir: str, seq_len: int, batch: int) -> str | None:
    """Why a transformer's ``data_dir`` (a text file, or a directory holding
    ``ptb.train.txt``) cannot feed batches of ``batch`` sequences of ``seq_len``
    byte-level tokens (``lm_text.problem``: missing, empty, not UTF-8, a NUL byte, too
    short), naming the file; None when it can. A text is read once per version of it
    (its size and modification time), however many jobs name it."""
    train, _ = _text().files(data_dir)
    try:
        st = os.stat(train)
        version: tuple[int, int] = (st.st_size, st.st_mtime_ns)
    except OSError:
        version = (-1, -1)
    return _text_problem(data_dir, seq_len, batch, version)


@functools.lru_cache(maxsize=64)
def _text_problem(data_dir: str, seq_len: int, batch: int,
                  version: tuple[int, int]) -> str | None:
    why = _text().problem(data_dir, seq_len, batch)
    return None if why is None else str(why)


def lm_catalog() -> ModuleType:
    """The runners' ``lm_catalog`` module, loaded once from its file (the FLOPs and bytes
    of :mod:`dltop.results.lmcost` and the functions below call it)."""
    return child_module("lm_catalog")


def shape(model: str) -> dict[str, Any]:
    """The transformer's shape (``lm_catalog.SHAPES[model]``: layers, d_model, context...).

    Raises:
        KeyError: ``model`` is not a transformer.
    """
    return dict(lm_catalog().shape(model))


def param_count(model: str) -> int:
    """Every trainable parameter of the transformer (``lm_catalog.param_count``)."""
    return int(lm_catalog().param_count(model))


def flops_per_token(model: str, seq_len: int, mode: str) -> float | None:
    """FLOPs per token of a run (``lm_catalog.flops_per_token``): None for generate."""
    value = lm_catalog().flops_per_token(model, seq_len, mode)
    return None if value is None else float(value)


def default_prompt_tokens() -> int:
    """Prompt length of a generate job that does not set ``prompt_tokens``."""
    return int(lm_catalog().DEFAULT_PROMPT_TOKENS)


def default_new_tokens() -> int:
    """Decoded tokens of a generate job that does not set ``new_tokens``."""
    return int(lm_catalog().DEFAULT_NEW_TOKENS)


def mode_checks(err: Err, loc: Loc, s: dict[str, Any]) -> None:
    """Checks of the transformer settings against ``mode`` alone (before any model).

    Raises:
        UserError: generation keys without ``mode = "generate"``, or a setting
            that generation cannot honour.
    """
    if s["mode"] == "serve":  # an endpoint's requests: profiles/serve.py checks the rest
        for key in ("seq_len", "attention"):
            if s[key] is not None:
                raise err(loc(key), f'{key} does not apply to mode = "serve" (the server '
                          "holds the model; prompt_tokens and new_tokens size a request)")
        return
    if s["mode"] != "generate":
        for key in GENERATE_KEYS:
            if s[key] is not None:
                modes = " or ".join(f'"{m}"' for m in settings()[key].metadata[MODES])
                raise err(loc(key), f"{key} applies to mode = {modes} only "
                          f"(mode is {s['mode']!r})")
        return
    if s["seq_len"] is not None:
        raise err(loc("seq_len"), 'seq_len is the sequence of training and inference; '
                  'mode = "generate" takes prompt_tokens and new_tokens instead')
    if s["epochs"] is not None:
        raise err(loc("epochs"), 'epochs is for training; mode = "generate" times '
                  "generation requests over iterations")
    if s["data"] == "real":
        raise err(loc("data"), 'mode = "generate" prompts with synthetic token ids; '
                  'data = "real" applies to train and inference')


def job_settings(err: Err, loc: Loc, s: dict[str, Any], framework: str, model: str,
                 device: DeviceSpec, user_keys: Collection[str]) -> dict[str, Any]:
    """One job's settings with the transformer defaults filled in, checked against the model.

    Args:
        err: builds the loader's error (file, key, message).
        loc: the key's place in the profile (``matrix[0].seq_len``).
        s: the entry's validated settings (one sweep combination).
        framework: the job's framework.
        model: the job's model.
        device: the job's device (generation runs on one worker).
        user_keys: the keys the profile set for this entry (its own, ``[defaults]``'s),
            so that a default never overrides what the user wrote.

    Returns:
        ``s`` itself for the other models, else a copy with ``seq_len``, ``attention``,
        ``prompt_tokens``/``new_tokens`` and the AdamW defaults filled in.

    Raises:
        UserError: a transformer key on another model, a length over the context,
            CNTK, or generation over several data-parallel workers.
    """
    can = catalog.capabilities(framework)
    if "serve" in can.modes:  # a served model: its keys are profiles/serve.py's
        return s
    if can.program or model not in catalog.TRANSFORMER_MODELS:
        what = f'frameworks = ["{framework}"]' if can.program else model
        names = ", ".join(catalog.TRANSFORMER_MODELS)
        for key in LM_KEYS:
            if s[key] is not None:
                raise err(loc(key), f"{key} applies to the transformer models ({names}), "
                          f"not {what}")
        if s["mode"] == "generate":
            raise err(loc("mode"), f'mode = "generate" applies to the transformer models '
                      f"({names}), not {what}")
        return s
    if not can.transformers:
        raise err(loc("frameworks"), f"{framework.upper()} does not build the transformer "
                  f"models: its runner has no decoder language model ({model} runs in "
                  f"{', '.join(catalog.TRANSFORMER_FRAMEWORKS)}; docs/frameworks.md)")
    out = dict(s)
    if "optimizer" not in user_keys:
        out.update({k: v for k, v in ADAMW_DEFAULTS.items() if k not in user_keys})
    if out["attention"] is None:
        out["attention"] = ATTENTION_DEFAULT
    context = shape(model)["context"]
    if s["mode"] == "generate":
        workers = device.workers * s["nodes"]
        if workers > 1:
            key = "nodes" if s["nodes"] > 1 else "devices"
            raise err(loc(key), f'mode = "generate" runs on one device ({device.label} x '
                      f"{s['nodes']} node(s) is {workers} data-parallel workers): each "
                      "worker would decode its own requests with no step in common, so "
                      "one time per token would not describe them; give one device "
                      "(cpu:N threads or gpu:1)")
        if out["prompt_tokens"] is None:
            out["prompt_tokens"] = default_prompt_tokens()
        if out["new_tokens"] is None:
            out["new_tokens"] = default_new_tokens()
        total = out["prompt_tokens"] + out["new_tokens"]
        if total > context:
            key = "new_tokens" if "new_tokens" in user_keys else "prompt_tokens"
            raise err(loc(key), f"prompt_tokens + new_tokens = {out['prompt_tokens']} + "
                      f"{out['new_tokens']} = {total} is over {model}'s context of "
                      f"{context} tokens")
        return out
    if out["seq_len"] is None:
        out["seq_len"] = int(shape(model)["seq_len"])
    if out["seq_len"] > context:
        raise err(loc("seq_len"), f"seq_len {out['seq_len']} is over {model}'s context "
                  f"of {context} tokens (at most {context})")
    return out
