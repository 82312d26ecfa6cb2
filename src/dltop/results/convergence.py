"""Convergence and inference metrics of one run: accuracy, time-to-accuracy, epoch time,
latency percentiles (issue 17).

Evaluations come from the ``evals`` table (one row per evaluation the runner
made, :mod:`dltop.jobs.evals`); ``train_s`` there is the wall time of training
so far with evaluations left out, so time-to-accuracy follows DAWNBench's rule:
the training seconds up to the first evaluation at or above the target, the
evaluations' own seconds reported apart.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dltop.store.read import iterations, jobs

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation of a run on the test set."""

    idx: int
    """Index of the last training step before it."""
    epoch: float | None
    accuracy: float | None
    """Fraction of test samples right, 0..1 (None for the language model)."""
    perplexity: float | None
    loss: float | None
    eval_s: float
    """Wall seconds the evaluation took."""
    train_s: float
    """Wall seconds of training before it, evaluations excluded."""


@dataclass(frozen=True)
class Reached:
    """When a run first reached its target accuracy (or perplexity)."""

    train_s: float
    """Training seconds up to that evaluation (evaluations excluded)."""
    eval_s: float
    """Seconds all evaluations up to and including that one took."""
    epoch: float | None


def evals_of(db: sqlite_utils.Database, run_ids: Sequence[int]) -> dict[int, list[EvalPoint]]:
    """Each run's evaluations in order (runs without any are left out; none before
    migration 14)."""
    return {rid: [EvalPoint(int(r["idx"]), r["epoch"], r["accuracy"], r["perplexity"],
                            r["loss"], float(r["eval_s"] or 0.0), float(r["train_s"] or 0.0))
                  for r in rows] for rid, rows in iterations.evals(db, run_ids).items()}


def targets_of(db: sqlite_utils.Database, run_ids: Sequence[int],
               key: str = "target_accuracy") -> dict[int, float]:
    """Each run's ``target_accuracy`` (or ``target_perplexity``: ``key``; runs whose job
    has none are left out), read from its job's stored spec: the setting is not
    identity, so no column holds it."""
    out: dict[int, float] = {}
    for run_id, r in jobs.run_specs(db, run_ids).items():
        target = json.loads(r["spec_json"]).get(key)
        if isinstance(target, int | float) and not isinstance(target, bool):
            out[run_id] = float(target)
    return out


def final_accuracy(evals: Sequence[EvalPoint]) -> float | None:
    """The last evaluation's accuracy (None: no evaluation, or no accuracy measured)."""
    return evals[-1].accuracy if evals else None


def final_perplexity(evals: Sequence[EvalPoint]) -> float | None:
    """The last evaluation's perplexity (the language model's figure)."""
    return evals[-1].perplexity if evals else None


def time_to_accuracy(evals: Sequence[EvalPoint], target: float) -> Reached | None:
    """The first evaluation at or above ``target`` accuracy, or None (not reached)."""
    spent = 0.0
    for e in evals:
        spent += e.eval_s
        if e.accuracy is not None and e.accuracy >= target:
            return Reached(e.train_s, spent, e.epoch)
    return None


def time_to_perplexity(evals: Sequence[EvalPoint], target: float) -> Reached | None:
    """The first evaluation at or below ``target`` perplexity, or None (not reached)."""
    spent = 0.0
    for e in evals:
        spent += e.eval_s
        if e.perplexity is not None and e.perplexity <= target:
            return Reached(e.train_s, spent, e.epoch)
    return None


def epoch_time(evals: Sequence[EvalPoint]) -> float | None:
    """Median training seconds per epoch over the intervals between evaluations that
    say their epoch (the first from the start of training); None without any."""
    per_epoch: list[float] = []
    last_epoch, last_s = 0.0, 0.0
    for e in evals:
        if e.epoch is None or e.epoch <= last_epoch:
            continue
        per_epoch.append((e.train_s - last_s) / (e.epoch - last_epoch))
        last_epoch, last_s = e.epoch, e.train_s
    return statistics.median(per_epoch) if per_epoch else None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of sorted values, linear between ranks (numpy's
    default); the same rule as the engine's stored ``latency_p50_s``/``latency_p99_s``."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


LATENCY_QUANTILES = (50.0, 90.0, 99.0)

Percentiles = tuple[float, float | None, float | None]
"""(p50, p90, p99) in seconds; p90 or p99 is ``None`` where too few samples stand behind
it (:func:`min_samples`)."""


def min_samples(q: float) -> int:
    """The fewest samples a ``q``-th percentile is given from (docs/metrics.md,
    statistics policy): n ≥ 100 / (100 − q) above the median and 100 / q below it, so
    that at least one sample lies at or beyond it (p90 and p10: 10, p95: 20, p99: 100);
    the median needs one."""
    if q == 50.0:
        return 1
    return math.ceil(100.0 / min(q, 100.0 - q) - 1e-9)


def percentile_or_none(sorted_values: Sequence[float], q: float) -> float | None:
    """:func:`percentile`, or ``None`` from fewer than :func:`min_samples` values: the one
    rule for every latency, TTFT, TPOT and ITL percentile a table or a view shows."""
    if len(sorted_values) < min_samples(q):
        return None
    return percentile(sorted_values, q)


def too_few(n: int) -> str:
    """What a percentile cell says instead of a number from ``n`` samples."""
    return f"n/a: n={n}"


def percentiles(values: Sequence[float]) -> Percentiles | None:
    """(p50, p90, p99) of ``values`` under :func:`percentile_or_none` (None without any)."""
    if not values:
        return None
    ordered = sorted(values)
    p50 = percentile(ordered, LATENCY_QUANTILES[0])
    p90, p99 = (percentile_or_none(ordered, q) for q in LATENCY_QUANTILES[1:])
    return p50, p90, p99
