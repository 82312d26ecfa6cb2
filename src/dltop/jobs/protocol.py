"""What the engine accepts from a runner's events (protocol v1, parent side).

The child is not trusted: a framework runner with a bug, a user's program
calling ``dltop_report.report(0.01, samples=10**20)``, or anything writing to
the event pipe. Every decoded event passes :class:`EventChecker` before it
reaches the collector or the database; an event that fails is a *protocol
error* (counted in ``runs.protocol_errors``, the first one's text kept in
``runs.note``) and is skipped, so one bad value never ends the engine nor reaches
a statistic. The rules, per field:

- any integer anywhere in an event fits SQLite's INTEGER (signed 64 bits);
- ``iter``: ``index`` an integer, 0 or more, larger than the run's previous
  index (a repeated or earlier index would make ``n_iterations`` differ from the
  stored rows); ``seconds`` a number with 0 < seconds <= :data:`MAX_STEP_S`;
  ``samples`` null or an integer in [1, 2**53); ``warmup`` a boolean (or 0/1);
  ``loss`` null, a number, or ``"nan"``/``"inf"``/``"-inf"`` (a non-finite loss
  is stored as NULL, as before: divergence is the runner's ``error`` event);
  ``t_mono_ns`` absent, null or an integer 0 or more;
- ``hello``: its text fields text, numbers or null; ``threads`` and ``pid``
  null or integers 0 or more;
- ``model``: ``param_count`` null or an integer 0 or more, ``flops_per_sample``
  null or a finite number 0 or more;
- ``error``: ``kind`` and ``message`` text (or a null message);
- ``done``: ``gpu_mem_peak_bytes`` absent, null or an integer 0 or more (the
  framework's own peak of GPU memory it allocated, summed over the run's GPUs) and
  ``page_faults_per_step`` absent, null or a finite number 0 or more (the runner's page
  faults over its measured steps, per step);
- ``plan``, ``eval`` and ``profile`` (convergence, evaluation and operator
  profiles, issue 17) and ``generate`` (one generation request, issue 29): see
  :mod:`dltop.jobs.protocol_evals`; ``request`` and ``load`` (a serve run's requests
  and its measured load, issue 41): see :mod:`dltop.jobs.protocol_serve`.

A line nested deeper than :data:`MAX_EVENT_DEPTH` is refused before it is decoded
(:func:`too_deep`), and a ``refused`` event (a runner relaying a line its program
wrote that it could not read: ``why``) is itself a protocol error.

Events of other names are accepted (forward compatibility), within the integer rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dltop.childfiles import child_module
from dltop.jobs import protocol_evals
from dltop.jobs.protocol_evals import (
    _is_int,
    _show,
    check_eval,
    check_generate,
    check_plan,
    check_profile,
)
from dltop.jobs.protocol_serve import check_idle, check_load, check_request

INT64_MAX = 2**63 - 1
MAX_SAMPLES = 2**53
"""Samples per iteration stay below this: exact as a float, so throughput stays exact."""
MAX_STEP_S = 1e6
"""No training step takes longer than 11.6 days; a longer one is a runner's bug."""

_PROTOCOL = child_module("dltop_protocol")
MAX_EVENT_DEPTH: int = _PROTOCOL.MAX_EVENT_DEPTH
"""Arrays and objects nest at most this deep in an event (``profile``'s ops reach 3);
``json.loads`` recurses once per level, so deeper lines are refused unread. The runners'
own constant: one rule on both sides of the protocol."""

_HELLO_TEXT = ("framework", "framework_version", "python_version", "python_executable",
               "device", "blas", "cuda_version", "cudnn_version", "device_name")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def too_deep(line: bytes, limit: int = MAX_EVENT_DEPTH) -> bool:
    """Whether the JSON text ``line`` nests arrays or objects deeper than ``limit``.

    The runners' own check (``dltop_protocol.too_deep``, loaded from its file): a linear
    scan with strings skipped by one regular expression, so ``[`` x 100 000 costs
    microseconds and no recursion.
    """
    return bool(_PROTOCOL.too_deep(line, limit))


def _check_refused(e: dict[str, Any]) -> str:
    return str(e.get("why") or "a line the runner could not read")[:200]


def _big_int(v: Any, path: str, depth: int = 0) -> str | None:
    """Where an integer too large for SQLite sits in ``v`` (None if nowhere)."""
    if _is_int(v):
        return path if not -INT64_MAX - 1 <= v <= INT64_MAX else None
    if depth > 20:
        return None
    if isinstance(v, dict):
        items: Any = v.items()
    elif isinstance(v, list):
        items = enumerate(v)
    else:
        return None
    for k, item in items:
        where = _big_int(item, f"{path}.{k}" if path else str(k), depth + 1)
        if where is not None:
            return where
    return None


def _check_iter(e: dict[str, Any], last_index: int) -> str | None:
    index: Any = e.get("index")
    if not _is_int(index) or index < 0:
        return f"index {_show(index)} is not an integer >= 0"
    if index <= last_index:
        return (f"index {index} repeats or goes back (after {last_index}): each iteration "
                "needs a new, larger index")
    seconds: Any = e.get("seconds")
    if not _is_number(seconds) or not math.isfinite(seconds) \
            or not 0 < seconds <= MAX_STEP_S:
        return f"seconds {_show(seconds)} is not a number in (0, {MAX_STEP_S:g}]"
    samples: Any = e.get("samples")
    if samples is not None and (not _is_int(samples) or not 1 <= samples < MAX_SAMPLES):
        return f"samples {_show(samples)} is not an integer in [1, 2**53)"
    warmup = e.get("warmup")
    if warmup is not None and warmup not in (True, False, 0, 1):
        return f"warmup {_show(warmup)} is not a boolean"
    loss: Any = e.get("loss")
    if loss is not None:
        if isinstance(loss, str):
            if loss.strip().lower() not in protocol_evals.NONFINITE:
                return f"loss {_show(loss)} is not a number"
        elif not _is_number(loss):
            return f"loss {_show(loss)} is not a number"
        elif _is_int(loss) and abs(loss) > 1e308:
            return f"loss {_show(loss)} is too large for a float"
    t: Any = e.get("t_mono_ns")
    if t is not None and (not _is_int(t) or t < 0):
        return f"t_mono_ns {_show(t)} is not an integer >= 0"
    return None


def _check_hello(e: dict[str, Any]) -> str | None:
    for key in _HELLO_TEXT:
        v: Any = e.get(key)
        if v is not None and not isinstance(v, (str, int, float)):
            return f"{key} {_show(v)} is not text"
    for key in ("threads", "pid"):
        v = e.get(key)
        if v is not None and (not _is_int(v) or v < 0):
            return f"{key} {_show(v)} is not an integer >= 0"
    return None


def _check_model(e: dict[str, Any]) -> str | None:
    params: Any = e.get("param_count")
    if params is not None and (not _is_int(params) or params < 0):
        return f"param_count {_show(params)} is not an integer >= 0"
    flops: Any = e.get("flops_per_sample")
    if flops is not None and (not _is_number(flops) or not math.isfinite(flops)
                              or flops < 0 or abs(flops) > 1e308):
        return f"flops_per_sample {_show(flops)} is not a finite number >= 0"
    return None


SETUP_SECONDS = ("compile_s", "capture_s")
"""The ``setup`` event's one-off seconds before the first iteration (torch.compile's
priming steps, CUDA graph capture)."""


def _check_setup(e: dict[str, Any]) -> str | None:
    # Its fields join the hello's facts (environment.extra), so each is a scalar.
    for key, v in e.items():
        if key in ("v", "event"):
            continue
        if key in SETUP_SECONDS:
            if v is not None and (not _is_number(v) or not math.isfinite(v)
                                  or not 0 <= v <= MAX_STEP_S):
                return f"{key} {_show(v)} is not a number of seconds in [0, {MAX_STEP_S:g}]"
        elif v is not None and not isinstance(v, (str, int, float)):
            return f"{key} {_show(v)} is not text or a number"
    return None


def _check_done(e: dict[str, Any]) -> str | None:
    v = e.get("gpu_mem_peak_bytes")
    if v is not None and (not _is_int(v) or v < 0):
        return f"gpu_mem_peak_bytes {_show(v)} is not a byte count (an integer 0 or more)"
    v = e.get("page_faults_per_step")
    if v is not None and (not _is_number(v) or not math.isfinite(v) or v < 0):
        return f"page_faults_per_step {_show(v)} is not a count (a number 0 or more)"
    return None


def _check_error(e: dict[str, Any]) -> str | None:
    if not isinstance(e.get("kind"), str):
        return f"kind {_show(e.get('kind'))} is not text"
    if e.get("message") is not None and not isinstance(e.get("message"), str):
        return f"message {_show(e.get('message'))} is not text"
    return None


class EventChecker:
    """Checks one run's decoded events, in order (it remembers the last iteration index)."""

    def __init__(self) -> None:
        self.last_index = -1
        self.last_eval_index = -1
        self.last_generate_index = -1
        self.last_request_index = -1

    def problem(self, event: dict[str, Any]) -> str | None:
        """Why ``event`` is refused (``iter event: seconds -6.24 is not ...``), or None.

        An accepted ``iter`` event moves the index the next one must exceed.
        """
        name = event.get("event")
        where = _big_int(event, "")
        if where is not None:
            return f"{name} event: {where} {_show(event_path(event, where))} is out of range " \
                   "(SQLite integers are 64-bit)"
        checks: dict[str, Callable[[dict[str, Any]], str | None]] = {
                 "iter": lambda e: _check_iter(e, self.last_index), "hello": _check_hello,
                 "model": _check_model, "error": _check_error, "plan": check_plan,
                 "setup": _check_setup, "done": _check_done,
                 "eval": lambda e: check_eval(e, self.last_eval_index),
                 "profile": check_profile, "refused": _check_refused,
                 "generate": lambda e: check_generate(e, self.last_generate_index),
                 "request": lambda e: check_request(e, self.last_request_index),
                 "load": check_load, "idle": check_idle}
        check = checks.get(str(name))
        why = check(event) if check is not None else None
        if why is not None:
            return f"{name} event: {why}"
        if name == "iter":
            self.last_index = event["index"]
        elif name == "eval":
            self.last_eval_index = event["index"]
        elif name == "generate":
            self.last_generate_index = event["index"]
        elif name == "request":
            self.last_request_index = event["index"]
        return None


def event_path(event: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` (as :func:`_big_int` names it) in ``event``."""
    v: Any = event
    for part in path.split("."):
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v
