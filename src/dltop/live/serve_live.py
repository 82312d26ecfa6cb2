"""A serve run (``mode = "serve"``, issue 41) as it runs: what the run panel and the
exporter show of it, from the rows stored so far.

The engine writes each request's ``serve_requests`` row (and an ok one's
``generations`` row) as it ends, in the batches iterations are written in, so a read
sees the requests ended up to half a second ago. Everything is measured requests
only (warm-up ones are counted apart), with the after-run figures' definitions
(:mod:`dltop.results.serving`, docs/metrics.md): the achieved rate is ok requests over
the time from the measured load's start to the last end; TTFT and ITL (per token)
are the generation rows', their percentiles under the project's sample rule
(:func:`dltop.results.convergence.percentile_or_none`: a p99 from 100 samples on).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dltop.results.convergence import percentile_or_none
from dltop.store.read import generations, runs, serving


@dataclass(frozen=True)
class Quantiles:
    """p50 and p99 of a latency so far (None: too few samples for it), and n."""

    p50_s: float | None
    p99_s: float | None
    n: int


@dataclass(frozen=True)
class ServeLive:
    """A running serve run's requests so far."""

    asked_rate_per_s: float | None
    """The request rate asked (None: ``"inf"``, as fast as the concurrency allows)."""
    warmup_done: int
    ok: int
    """Measured requests that ended with tokens and no error."""
    failed: int
    in_flight: int | None
    """The client's requests in flight when the newest one ended (None before any)."""
    window_s: float | None
    """From the measured load's start to its newest end (None before a measured one)."""
    output_tokens: int
    last_error: str | None
    ttft_s: tuple[float, ...]
    """TTFT of the ok measured requests, sorted."""
    itl_s: tuple[float, ...]
    """Their per-token inter-token latencies (the default ``itl``), sorted."""

    @property
    def achieved_rate_per_s(self) -> float | None:
        """Ok requests per second of the measured load so far."""
        return self.ok / self.window_s if self.window_s else None

    @property
    def output_tokens_per_s(self) -> float | None:
        """Their output tokens per second of the same window."""
        return self.output_tokens / self.window_s if self.window_s else None

    @property
    def ttft(self) -> Quantiles:
        """TTFT p50/p99 so far."""
        return _quantiles(self.ttft_s)

    @property
    def itl(self) -> Quantiles:
        """Per-token ITL p50/p99 so far."""
        return _quantiles(self.itl_s)


def _quantiles(values: tuple[float, ...]) -> Quantiles:
    return Quantiles(percentile_or_none(values, 50), percentile_or_none(values, 99),
                     len(values))


def asked_rate(spec_json: str | None) -> tuple[bool, float | None]:
    """(whether the job is a serve job, the request rate it asks: None for ``"inf"``)."""
    try:
        spec: dict[str, Any] = json.loads(spec_json or "{}")
    except ValueError:
        return False, None
    rate = spec.get("request_rate")
    serve = spec.get("mode") == "serve"
    return serve, float(rate) if serve and isinstance(rate, int | float) else None


def serve_live(db: Any, run_id: int) -> ServeLive | None:
    """Run ``run_id``'s requests so far (None: not a serve run)."""
    serve, rate = asked_rate(runs.specs(db, [run_id]).get(run_id))
    if not serve:
        return None
    got = serving.so_far(db, run_id) or {}
    gens = generations.requests(db, [run_id]).get(run_id, [])
    return ServeLive(
        rate, int(got.get("warmup") or 0), int(got.get("ok") or 0),
        int(got.get("failed") or 0), got.get("in_flight"), got.get("window_s"),
        int(got.get("tokens") or 0), got.get("error"),
        tuple(sorted(float(g["ttft_s"]) for g in gens if g["ttft_s"] is not None)),
        tuple(sorted(x for g in gens for x in g["itl_s"])))
