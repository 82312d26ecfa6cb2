"""Checks of the convergence, evaluation and profile events (protocol v1, issue 17).

Part of :mod:`dltop.jobs.protocol` (an event failing here is a protocol error,
counted and skipped like any other). The rules, per event:

- ``plan``: ``iterations`` an integer >= 1 (training steps, warm-up included, or
  inference batches); ``steps_per_epoch`` and ``epochs`` null or integers >= 1;
  ``n_train`` and ``n_test`` null or integers >= 0;
- ``eval``: ``index`` an integer >= 0, larger than the run's previous eval's
  (an eval is stored under it); ``epoch`` null or a finite number >= 0;
  ``accuracy`` null or a number in [0, 1]; ``perplexity`` and ``loss`` null, a
  number, or ``"nan"``/``"inf"`` (stored as NULL), a finite perplexity > 0;
  ``eval_s`` and ``train_s`` finite numbers >= 0 (required); ``samples`` null or an
  integer >= 1; ``t_mono_ns`` (optional: when it ended, ``time.monotonic_ns``; else
  its arrival) null or an integer >= 0;
- ``profile``: ``steps`` an integer >= 1, ``step_ms`` a finite number > 0,
  ``device`` ``"cpu"`` or ``"cuda"``, ``ops`` a list of at most
  :data:`MAX_PROFILE_OPS` objects, each with ``name`` (text, 1 to
  :data:`MAX_OP_NAME` characters), ``calls`` (integer >= 0), ``self_cpu_ms`` and
  ``total_ms`` (finite >= 0), ``self_device_ms`` (null or finite >= 0) and
  ``shapes`` (null or text);
- ``generate`` (one generation request, ``mode = "generate"``, issue 29): ``index``
  an integer >= 0, larger than the run's previous generate's (its ``iter`` follows
  under the same index); ``warmup`` a boolean; ``ttft_s`` a finite number in
  (0, :data:`MAX_SECONDS`]; ``prompt_tokens``, ``new_tokens`` and ``batch`` integers
  >= 1, ``new_tokens`` at most :data:`MAX_NEW_TOKENS`; ``itl_s`` a list of exactly
  ``new_tokens - 1`` finite numbers in [0, :data:`MAX_SECONDS`]; ``distinct_tokens``
  (optional, issue 42) null or an integer in [``batch``, ``batch × new_tokens``]: over
  the request's sequences, the sum of each one's distinct generated ids.
"""

from __future__ import annotations

import math
from typing import Any

MAX_PROFILE_OPS = 40
"""Operators a profile event may list (the runners send the top ones by self time)."""
MAX_OP_NAME = 16384
"""Characters of one operator name. C++ template kernels (CUTLASS, CuTe) are named by
their whole instantiation, over 500 characters on an H200 run (2026-11-26), a few
thousand at worst; the full name is stored (displays shorten it, with a hash:
:func:`dltop.results.profile.short_op_name`). 40 names at the limit stay well under
an event line's 1 MiB."""
MAX_SECONDS = 1e9
"""No evaluation, nor training so far, lasts longer than ~31 years: a larger value is a bug."""
MAX_NEW_TOKENS = 65536
"""Tokens one generation request may decode: its ``itl_s`` list has one fewer. A longer
list is a runner's bug (no catalogue model has a context near it), and the bound keeps
one event's stored row small (8 bytes per latency)."""
NONFINITE = frozenset({"nan", "-nan", "inf", "+inf", "-inf", "infinity", "-infinity"})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= 1e308 \
        and math.isfinite(v)


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _int_field(e: dict[str, Any], key: str, low: int, *, required: bool = False) -> str | None:
    v: Any = e.get(key)
    if v is None and not required:
        return None
    if not _is_int(v) or v < low:
        return f"{key} {_show(v)} is not an integer >= {low}"
    return None


def _number_field(e: dict[str, Any], key: str, *, required: bool = False,
                  positive: bool = False) -> str | None:
    v: Any = e.get(key)
    if v is None and not required:
        return None
    if not _finite(v) or v < 0 or (positive and v == 0):
        return f"{key} {_show(v)} is not a finite number {'>' if positive else '>='} 0"
    return None


def _maybe_nonfinite(e: dict[str, Any], key: str) -> str | None:
    """Null, a number, or a non-finite spelled as text (stored as NULL)."""
    v: Any = e.get(key)
    if v is None or (isinstance(v, str) and v.strip().lower() in NONFINITE):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if not _finite(v):
        return f"{key} {_show(v)} is not a number"
    return None


def check_plan(e: dict[str, Any]) -> str | None:
    """Why a ``plan`` event is refused, or None."""
    return (_int_field(e, "iterations", 1, required=True)
            or _int_field(e, "steps_per_epoch", 1) or _int_field(e, "epochs", 1)
            or _int_field(e, "n_train", 0) or _int_field(e, "n_test", 0))


def _rising_index(e: dict[str, Any], last_index: int, why_new: str) -> str | None:
    """Why the event's ``index`` is refused: not an integer >= 0, or not above the
    previous event's (``why_new`` says what a new index stands for)."""
    why = _int_field(e, "index", 0, required=True)
    if why is None and e["index"] <= last_index:
        why = f"index {e['index']} repeats or goes back (after {last_index}): {why_new}"
    return why


def check_eval(e: dict[str, Any], last_index: int) -> str | None:
    """Why an ``eval`` event is refused, or None (``last_index``: the previous eval's)."""
    why = _rising_index(e, last_index, "each evaluation follows a later training step")
    if why is not None:
        return why
    acc: Any = e.get("accuracy")
    if acc is not None and (not _finite(acc) or not 0 <= acc <= 1):
        return f"accuracy {_show(acc)} is not a number in [0, 1]"
    why = (_number_field(e, "epoch") or _maybe_nonfinite(e, "perplexity")
           or _maybe_nonfinite(e, "loss") or _number_field(e, "eval_s", required=True)
           or _number_field(e, "train_s", required=True) or _int_field(e, "samples", 1)
           or _int_field(e, "t_mono_ns", 0))
    if why is not None:
        return why
    ppl: Any = e.get("perplexity")
    if _finite(ppl) and ppl <= 0:
        return f"perplexity {_show(ppl)} is not > 0"
    for key in ("eval_s", "train_s"):
        if e[key] > MAX_SECONDS:
            return f"{key} {_show(e[key])} is not a number in [0, {MAX_SECONDS:g}]"
    return None


def _check_op(i: int, op: Any) -> str | None:
    if not isinstance(op, dict):
        return f"ops.{i} {_show(op)} is not an object"
    name: Any = op.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_OP_NAME:
        return f"ops.{i}.name {_show(name)} is not text of 1 to {MAX_OP_NAME} characters"
    why = (_int_field(op, "calls", 0, required=True)
           or _number_field(op, "self_cpu_ms", required=True)
           or _number_field(op, "self_device_ms")
           or _number_field(op, "total_ms", required=True))
    if why is not None:
        return f"ops.{i}.{why}"
    if op.get("shapes") is not None and not isinstance(op.get("shapes"), str):
        return f"ops.{i}.shapes {_show(op.get('shapes'))} is not text"
    return None


def check_profile(e: dict[str, Any]) -> str | None:
    """Why a ``profile`` event is refused, or None."""
    why = _int_field(e, "steps", 1, required=True) \
        or _number_field(e, "step_ms", required=True, positive=True)
    if why is not None:
        return why
    if e.get("device") not in ("cpu", "cuda"):
        return f"device {_show(e.get('device'))} is not 'cpu' or 'cuda'"
    ops: Any = e.get("ops")
    if not isinstance(ops, list) or len(ops) > MAX_PROFILE_OPS:
        return f"ops is not a list of at most {MAX_PROFILE_OPS} operators"
    for i, op in enumerate(ops):
        why = _check_op(i, op)
        if why is not None:
            return why
    return None


def check_generate(e: dict[str, Any], last_index: int) -> str | None:
    """Why a ``generate`` event is refused, or None (``last_index``: the previous one's)."""
    why = _rising_index(e, last_index, "each generation request needs a new, larger index")
    if why is not None:
        return why
    if e.get("warmup") not in (True, False, 0, 1):
        return f"warmup {_show(e.get('warmup'))} is not a boolean"
    why = (_number_field(e, "ttft_s", required=True, positive=True)
           or _int_field(e, "prompt_tokens", 1, required=True)
           or _int_field(e, "new_tokens", 1, required=True)
           or _int_field(e, "batch", 1, required=True))
    if why is not None:
        return why
    if e["ttft_s"] > MAX_SECONDS:
        return f"ttft_s {_show(e['ttft_s'])} is not a number in (0, {MAX_SECONDS:g}]"
    new = e["new_tokens"]
    if new > MAX_NEW_TOKENS:
        return f"new_tokens {new} is over {MAX_NEW_TOKENS}"
    itl: Any = e.get("itl_s")
    if not isinstance(itl, list) or len(itl) != new - 1:
        got = f"{len(itl)} latencies" if isinstance(itl, list) else _show(itl)
        return f"itl_s is not a list of new_tokens - 1 = {new - 1} latencies (got {got})"
    for i, v in enumerate(itl):
        if not _finite(v) or not 0 <= v <= MAX_SECONDS:
            return f"itl_s.{i} {_show(v)} is not a number in [0, {MAX_SECONDS:g}]"
    distinct: Any = e.get("distinct_tokens")
    batch = e["batch"]
    if distinct is not None and (not _is_int(distinct) or not batch <= distinct <= batch * new):
        return (f"distinct_tokens {_show(distinct)} is not an integer in [batch, batch x "
                f"new_tokens] = [{batch}, {batch * new}]")
    return None
