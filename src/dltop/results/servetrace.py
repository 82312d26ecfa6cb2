"""One serve run's requests as its detail shows them (issue 41 item 6): each request's
TTFT and end-to-end latency against when it was sent, and the TTFT and ITL histograms.

Read by the report's run pages (:mod:`dltop.report.serving`) and the TUI's run detail
(:mod:`dltop.tui.servecharts`) alike, so both draw the same numbers. ITL is per token
(docs/metrics.md, "Serving"): a chunk of k tokens spreads its gap over k equal
latencies, the first chunk's extra tokens arrive with it (k - 1 zeros).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dltop.results.serving import ServeRequest

BINS = 20
"""Histogram bins (a text chart has room for about this many bars)."""


@dataclass(frozen=True)
class Bin:
    """One histogram bar: ``count`` values in ``[lo_s, hi_s)`` (the last bin closed)."""

    lo_s: float
    hi_s: float
    count: int


@dataclass(frozen=True)
class ServeTrace:
    """A serve run's measured requests over time and its latency histograms."""

    sent_s: tuple[float, ...]
    """Each request's send time from the start of the load, in schedule order."""
    ttft_s: tuple[float | None, ...]
    """Its TTFT (None: it failed before a first token)."""
    e2e_s: tuple[float | None, ...]
    """Its end-to-end latency (None: it failed)."""
    failed: int
    ttft_bins: tuple[Bin, ...]
    itl_bins: tuple[Bin, ...]
    n_itl: int
    """Per-token inter-token latencies the ITL histogram counts."""


def itl_per_token(q: ServeRequest) -> list[float]:
    """The request's per-token ITL from its chunk times and token counts (per chunk when
    the counts are missing)."""
    counts = q.chunk_tokens if len(q.chunk_tokens) == len(q.chunk_s) else (1,) * len(q.chunk_s)
    out = [0.0] * max(0, (counts[0] if counts else 1) - 1)
    for (a, b), k in zip(itertools.pairwise(q.chunk_s), counts[1:], strict=True):
        out += [(b - a) / max(1, k)] * max(1, k)
    return out


def histogram(values: Sequence[float], bins: int = BINS) -> tuple[Bin, ...]:
    """``bins`` equal bins from the least value to the greatest (one bin when all are
    equal to a nanosecond, a clock's rounding; none without values)."""
    if not values:
        return ()
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-9 or not math.isfinite(hi - lo):
        return (Bin(lo, hi, len(values)),)
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return tuple(Bin(lo + i * width, lo + (i + 1) * width, n) for i, n in enumerate(counts))


def serve_trace(requests: Sequence[ServeRequest]) -> ServeTrace | None:
    """The trace of a run's measured requests (None: it has none)."""
    if not requests:
        return None
    reqs = sorted(requests, key=lambda q: q.sent_s)
    itl = [x for q in reqs if q.ok for x in itl_per_token(q)]
    return ServeTrace(
        tuple(q.sent_s for q in reqs), tuple(q.ttft_s if q.ok else None for q in reqs),
        tuple(q.e2e_s if q.ok else None for q in reqs), sum(not q.ok for q in reqs),
        histogram([q.ttft_s for q in reqs if q.ok and q.ttft_s is not None]),
        histogram(itl), len(itl))
