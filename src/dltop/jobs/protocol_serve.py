"""Checks of a serve run's events (protocol v1, issue 41): ``request`` and ``load``.

Part of :mod:`dltop.jobs.protocol` (an event failing here is a protocol error, counted
and skipped like any other). The rules:

- ``request`` (one request of ``frameworks = ["openai"]``, as it ended): ``index`` an
  integer >= 0, larger than the run's previous request event's; ``request`` (its place
  in the schedule) an integer >= 0; ``warmup`` a boolean; ``scheduled_s``,
  ``dispatch_lag_s`` and ``slot_wait_s`` finite numbers in [0, :data:`MAX_SECONDS`];
  ``first_byte_s``, ``ttft_s`` and ``e2e_s`` null or such numbers; ``status`` an
  integer from 0 (no HTTP answer) to 599; ``error`` null or text of at most
  :data:`MAX_ERROR` characters; ``prompt_tokens`` null or an integer >= 0;
  ``output_tokens`` an integer >= 0; ``tokens_estimated`` a boolean; ``chunk_s`` a list
  of at most :data:`MAX_CHUNKS` such numbers and ``chunk_tokens`` as many integers in
  [0, 2**32); ``in_flight`` (the client's other requests in flight as it ended) and
  ``resent`` (times it was sent again) null or integers >= 0; ``resend_s`` (from its
  first send to the one answered) null or a finite number in [0, :data:`MAX_SECONDS`];
  ``cached_tokens`` (the prompt tokens the server served from its cache, where its usage
  says) null or an integer >= 0; ``max_tokens`` (what it asked) null or an integer >= 1;
  ``sent_tokens`` (the prompt's tokens as the client counted what it sent, where a
  tokenizer counted them: not stored, the ``prompts repeated`` note's measure of a chat
  template's head) null or an integer >= 0.
- ``load`` (once, after the measured requests): ``window_s`` a finite number > 0,
  ``client_cpu_s`` a finite number >= 0, ``asked_rate`` null or a finite number > 0,
  ``server_cold_start_s`` (a server the runner started) null or a finite number >= 0,
  ``token_source`` null or :data:`TOKEN_SOURCES` joined by ``+``, ``client_processes``
  null or an integer >= 1, ``length_forced`` null or a boolean, ``short_requests``
  (of the ``ok`` measured requests, those shorter than ``new_tokens``),
  ``resent_requests`` (measured requests sent again because their pooled connection was
  closed before any byte) and ``ok`` null or integers >= 0; ``dataset_prompts`` and
  ``dropped_prompts`` (``max_prompt_tokens``'s, no more than the first) null or integers
  >= 0, ``prompt_count_by`` null or one of :data:`PROMPT_COUNTS`, ``dropped_over`` (what
  the dropped prompts were over, where not ``max_prompt_tokens``: the server's stated
  context less ``new_tokens``) null or text of at most :data:`MAX_ERROR` characters.
- ``idle`` (once, before the load: the runner waited with nothing sent):
  ``start_mono_ns`` and ``end_mono_ns`` integers, the start >= 0 and not after the end.
"""

from __future__ import annotations

from typing import Any

from dltop.jobs.protocol_evals import (
    MAX_NEW_TOKENS,
    MAX_SECONDS,
    _finite,
    _int_field,
    _is_int,
    _number_field,
    _show,
)

MAX_CHUNKS = MAX_NEW_TOKENS
"""Content chunks one request may list (each carries one token or more)."""
MAX_ERROR = 4000
"""Characters of a request's error text."""
_BOOL = (True, False, 0, 1)
TOKEN_SOURCES = ("estimated", "tokenize", "tokenizer", "usage")
PROMPT_COUNTS = ("tokenize", "tokenizer", "words")
"""What counted the dataset prompts ``max_prompt_tokens`` dropped."""
"""What may count a request's output tokens (the runner's ``openai_tokens``)."""


def _seconds(e: dict[str, Any], key: str, required: bool) -> str | None:
    why = _number_field(e, key, required=required)
    if why is None and e.get(key) is not None and e[key] > MAX_SECONDS:
        why = f"{key} {_show(e[key])} is over {MAX_SECONDS:g} s"
    return why


def check_request(e: dict[str, Any], last_index: int) -> str | None:
    """Why a ``request`` event is refused, or None (``last_index``: the previous one's)."""
    index: Any = e.get("index")
    if not _is_int(index) or index < 0 or index <= last_index:
        return f"index {_show(index)} is not an integer above {last_index} (each request " \
               "event needs a new, larger index)"
    if e.get("warmup") not in _BOOL or e.get("tokens_estimated") not in _BOOL:
        return "warmup and tokens_estimated must be booleans"
    why = (_int_field(e, "request", 0, required=True)
           or _int_field(e, "output_tokens", 0, required=True)
           or _int_field(e, "prompt_tokens", 0)
           or _int_field(e, "status", 0, required=True)
           or _int_field(e, "in_flight", 0)
           or _int_field(e, "resent", 0)
           or _int_field(e, "cached_tokens", 0)
           or _int_field(e, "sent_tokens", 0)
           or _int_field(e, "max_tokens", 1))
    for key in ("scheduled_s", "dispatch_lag_s", "slot_wait_s"):
        why = why or _seconds(e, key, True)
    for key in ("first_byte_s", "ttft_s", "e2e_s", "resend_s"):
        why = why or _seconds(e, key, False)
    if why is not None:
        return why
    if e["status"] > 599:
        return f"status {_show(e['status'])} is not an HTTP status (0 for none)"
    error: Any = e.get("error")
    if error is not None and (not isinstance(error, str) or len(error) > MAX_ERROR):
        return f"error is not text of at most {MAX_ERROR} characters"
    times: Any = e.get("chunk_s")
    counts: Any = e.get("chunk_tokens")
    if not isinstance(times, list) or not isinstance(counts, list) \
            or len(times) != len(counts) or len(times) > MAX_CHUNKS:
        return f"chunk_s and chunk_tokens are not lists of the same length <= {MAX_CHUNKS}"
    for i, (t, k) in enumerate(zip(times, counts, strict=True)):
        if not _finite(t) or not 0 <= t <= MAX_SECONDS:
            return f"chunk_s.{i} {_show(t)} is not a number in [0, {MAX_SECONDS:g}]"
        if not _is_int(k) or not 0 <= k < 2**32:
            return f"chunk_tokens.{i} {_show(k)} is not an integer in [0, 2**32)"
    return None


def check_load(e: dict[str, Any]) -> str | None:
    """Why a ``load`` event is refused, or None."""
    why = (_number_field(e, "window_s", required=True, positive=True)
           or _number_field(e, "client_cpu_s", required=True)
           or _number_field(e, "asked_rate", positive=True)
           or _number_field(e, "server_cold_start_s")
           or _int_field(e, "client_processes", 1)
           or _int_field(e, "short_requests", 0)
           or _int_field(e, "resent_requests", 0)
           or _int_field(e, "ok", 0)
           or _int_field(e, "dataset_prompts", 0)
           or _int_field(e, "dropped_prompts", 0))
    if why is None and (e.get("dropped_prompts") or 0) > (e.get("dataset_prompts") or 0):
        why = f"dropped_prompts {_show(e['dropped_prompts'])} is over dataset_prompts"
    if why is None and e.get("prompt_count_by") not in (None, *PROMPT_COUNTS):
        why = f"prompt_count_by {_show(e['prompt_count_by'])} is not one of " \
              f"{', '.join(PROMPT_COUNTS)}"
    over: Any = e.get("dropped_over")
    if why is None and over is not None and (not isinstance(over, str) or len(over) > MAX_ERROR):
        why = f"dropped_over is not text of at most {MAX_ERROR} characters"
    if why is None and e.get("length_forced") not in (None, *_BOOL):
        why = f"length_forced {_show(e['length_forced'])} is not a boolean"
    if why is None and e["window_s"] > MAX_SECONDS:
        why = f"window_s {_show(e['window_s'])} is over {MAX_SECONDS:g} s"
    source: Any = e.get("token_source")
    if why is None and source is not None and (not isinstance(source, str) or not set(
            source.split("+")) <= set(TOKEN_SOURCES)):
        why = f"token_source {_show(source)} is not one of {', '.join(TOKEN_SOURCES)} " \
              "(joined by +)"
    return why


def check_idle(e: dict[str, Any]) -> str | None:
    """Why an ``idle`` event is refused, or None."""
    start: Any = e.get("start_mono_ns")
    end: Any = e.get("end_mono_ns")
    if not _is_int(start) or not _is_int(end) or not 0 <= start <= end:
        return f"start_mono_ns {_show(start)} and end_mono_ns {_show(end)} are not " \
               "integers with 0 <= start <= end"
    return None
