"""Time windows of a job (issue 30): ``min_time_s`` and ``warmup_s``, their default and checks.

A runner measures ``iterations`` steps and then goes on measuring until the measured
window has lasted ``min_time_s``; it warms up ``warmup`` steps and goes on until
``warmup_s`` have passed since its first step (``convergence.Plan.timed`` on the child
side). The default ``min_time_s`` gives the default telemetry rates enough readings
for every figure dltop prints (docs/metrics.md says why 6 s). Where a window in
seconds cannot apply, the loader sets it to 0 and refuses a value the profile gives:

- ``epochs`` runs: their length is their epochs;
- ``frameworks = ["command"]``: the user's program decides how long it runs;
- CNTK training on several MPI ranks: the ranks have no channel to agree on a stop
  decided by the clock, and a rank that takes one more step than the others waits
  forever in its all-reduce.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles.fields import GROUP, seconds
from dltop.profiles.jobspec import declared

DEFAULT_MIN_TIME_S = 6.0
"""The product default: >= 10 host readings at 2 Hz after the first and last partial
ticks are left out, 60 GPU readings at 10 Hz, 6 energy-counter reads (docs/metrics.md)."""
DEFAULT_ENV = "DLTOP_DEFAULT_MIN_TIME_S"
"""Overrides the default ``min_time_s`` (seconds >= 0) for profiles that do not set it;
the test suite sets 0 so that its hundreds of short runs stay short."""
KEYS = declared(GROUP, "window")
"""The time windows (``setting(group="window")``)."""

ErrorFn = Callable[[str, str], UserError]


def default_min_time_s() -> float:
    """``min_time_s`` of a profile that does not set it: :data:`DEFAULT_MIN_TIME_S`, or
    :data:`DEFAULT_ENV`'s value.

    Raises:
        UserError: the variable is set to something other than seconds >= 0.
    """
    raw = os.environ.get(DEFAULT_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_MIN_TIME_S
    try:
        return seconds(float(raw))
    except ValueError:
        raise UserError(f"{DEFAULT_ENV}={raw!r}: expected a finite number of seconds "
                        f"{seconds.expected} (the default min_time_s of profiles that do not "
                        "set it)") \
            from None


def why_not(framework: str, settings: Mapping[str, Any], workers: int) -> str | None:
    """Why a window in seconds does not apply to this job, or None where it does."""
    can = catalog.capabilities(framework)
    if can.program:
        return f'frameworks = ["{framework}"] runs the program\'s own steps; dltop cannot add any'
    if "serve" in can.modes:
        return (f'frameworks = ["{framework}"] sends iterations requests on a schedule; a window '
                "in seconds would change the load")
    if settings.get("epochs") is not None:
        return "an epochs run's length is its epochs"
    if not can.clock_ranks and workers > 1 and settings.get("mode") == "train":
        return ("CNTK ranks cannot agree on a stop decided by the clock (a rank one step "
                "ahead would wait forever in its all-reduce); use cpu:N or a single device")
    return None


def resolve(err: ErrorFn, loc: Callable[[str], str], s: dict[str, Any], framework: str,
            workers: int, given: Callable[[str], bool]) -> dict[str, Any]:
    """``s`` with ``min_time_s`` and ``warmup_s`` settled for one job (a copy).

    Args:
        err: makes the loader's error from ``(key, message)``.
        loc: where a key was set (``matrix[0].min_time_s``).
        s: the job's checked settings.
        framework: the job's framework.
        workers: data-parallel ranks of the job (all nodes).
        given: whether the profile set a key (else it holds the default).

    Raises:
        UserError: a window set where it cannot apply, or one that does not fit in
            ``timeout_s``.
    """
    s = dict(s)
    reason = why_not(framework, s, workers)
    if reason is not None:
        for key in KEYS:
            if given(key) and s[key] > 0:
                raise err(loc(key), f"{key} does not apply here: {reason} (leave it at 0)")
            s[key] = 0.0
        return s
    window = s["min_time_s"] + s["warmup_s"]
    if window >= s["timeout_s"]:
        key = "warmup_s" if s["warmup_s"] > s["min_time_s"] else "min_time_s"
        default = "" if given("min_time_s") else f" (min_time_s is the default {s['min_time_s']:g})"
        raise err(loc(key), f"min_time_s + warmup_s = {window:g} s is not below timeout_s = "
                  f"{s['timeout_s']:g} s{default}: the run would time out; lower it or raise "
                  "timeout_s")
    return s

