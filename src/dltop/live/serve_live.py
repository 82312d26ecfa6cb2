"""A serve run (``mode = "serve"``, issue 41) as it runs: what the run panel and the
exporter show of it, from the rows stored so far.

The engine writes each request's ``serve_requests`` row (and an ok one's
``generations`` row) as it ends, in the batches iterations are written in, so a read
sees the requests ended up to half a second ago. Everything is measured requests
only (warm-up ones are counted apart). The live achieved rate and output tokens/s are
over the last :data:`RATE_WINDOW_S` of the load's clock, read now: a hung server that
ends nothing sees them fall to 0 (the after-run figures, :mod:`dltop.results.serving`,
are over the whole load). The load's clock is the runner's (rows hold ends from the
measured load's start); "now" on it is the newest end read plus the reader's
monotonic seconds since, anchored at the read where that sum was largest (the newest
end was then freshest). TTFT and ITL (per token) are the generation rows', their
percentiles under the project's sample rule
(:func:`dltop.results.convergence.percentile_or_none`: a p99 from 100 samples on).

Reads are incremental: a run of 10 000 requests of 128 tokens holds 1.3 million
ITLs, and reading them all took 0.9 s a read (0.1 s even to count them). Each read
takes the rows past the last one it saw (:class:`_SoFar`, per database file and run),
after checking that the last row it saw is still there (a database replaced, a
campaign deleted: then it reads them all again).
"""

from __future__ import annotations

import json
import threading
import time
from bisect import bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dltop.results.convergence import percentile_or_none
from dltop.store.read import jobs, serving
from dltop.store.read.changes import main_file
from dltop.store.read.generations import measured_since

RATE_WINDOW_S = 10.0
"""Seconds of the load's clock, back from now, that the live achieved rate and output
tokens/s count ok requests over (the TUI's run panel and the exporter alike)."""


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
    """Of the ok measured requests so far."""
    last_error: str | None
    ttft_s: Sequence[float]
    """TTFT of the ok measured requests, sorted (never changed once read: a later read
    holds new lists, so a million ITLs are not copied per read)."""
    itl_s: Sequence[float]
    """Their per-token inter-token latencies (the default ``itl``), sorted."""
    now_s: float | None = None
    """The load's clock at the read (seconds from the measured load's start; None before
    a measured request ended)."""
    recent_ok: int = 0
    """Ok measured requests that ended in the last :data:`RATE_WINDOW_S` before ``now_s``."""
    recent_tokens: int = 0
    """Their output tokens."""

    @property
    def rate_window_s(self) -> float | None:
        """The seconds the live rates are over: :data:`RATE_WINDOW_S`, or the load so far
        while it is shorter (None before a measured request ended)."""
        return min(RATE_WINDOW_S, self.now_s) if self.now_s else None

    @property
    def achieved_rate_per_s(self) -> float | None:
        """Ok requests per second over the last :attr:`rate_window_s` (0 while none ended
        in it: a hung server's rate falls, never holds still)."""
        w = self.rate_window_s
        return self.recent_ok / w if w else None

    @property
    def output_tokens_per_s(self) -> float | None:
        """Their output tokens per second of the same window."""
        w = self.rate_window_s
        return self.recent_tokens / w if w else None

    def seconds_left(self, requests: int) -> float | None:
        """How long ``requests`` more take at the rate measured requests ended so far (the
        asked rate before one ended; None with neither). An open loop's requests end at
        its arrival rate, not one per request latency."""
        ended = self.ok + self.failed
        rate = ended / self.window_s if ended and self.window_s else self.asked_rate_per_s
        return requests / rate if rate else None

    @property
    def ttft(self) -> Quantiles:
        """TTFT p50/p99 so far."""
        return _quantiles(self.ttft_s)

    @property
    def itl(self) -> Quantiles:
        """Per-token ITL p50/p99 so far."""
        return _quantiles(self.itl_s)


def _quantiles(values: Sequence[float]) -> Quantiles:
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


@dataclass
class _SoFar:
    """A run's requests read so far: the sums, the sorted latencies, the last indexes."""

    last_idx: int = -1
    last_scheduled_s: float | None = None
    warmup: int = 0
    ok: int = 0
    failed: int = 0
    tokens: int = 0
    window_s: float | None = None
    in_flight: int | None = None
    error: str | None = None
    last_gen_idx: int = -1
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    recent: list[tuple[float, int]] = field(default_factory=list)
    """(end, output tokens) of the ok measured requests of the last window, by end."""
    clock_offset_s: float | None = None
    """The load's clock minus the reader's monotonic one (the largest seen)."""

    def add(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if r["warmup"]:
                self.warmup += 1
            else:
                self.ok += bool(r["ok"])
                self.failed += not r["ok"]
                self.tokens += int(r["output_tokens"] or 0) if r["ok"] else 0
                self.window_s = max(self.window_s or 0.0, float(r["end_s"]))
                if r["ok"]:
                    insort(self.recent, (float(r["end_s"]), int(r["output_tokens"] or 0)))
            self.error = r["error"] if r["error"] is not None else self.error
        self.in_flight = rows[-1]["in_flight"]
        self.last_idx = int(rows[-1]["idx"])

    def add_latencies(self, gens: list[dict[str, Any]]) -> None:
        # New lists, never changed in place (a ServeLive holds the old ones); sorted()
        # merges the sorted run and the new tail in linear time.
        self.ttft_s = sorted(self.ttft_s + [float(g["ttft_s"]) for g in gens])
        self.itl_s = sorted(self.itl_s + [x for g in gens for x in g["itl_s"]])
        self.last_gen_idx = int(gens[-1]["idx"])

    def recent_at(self, mono_s: float) -> tuple[float | None, int, int]:
        """(the load's clock at ``mono_s``, ok requests and their tokens that ended in the
        last :data:`RATE_WINDOW_S` before it); older ends are dropped."""
        if self.window_s is None:
            return None, 0, 0
        # the newest end is at most now: the largest offset is the least late estimate
        offset = self.window_s - mono_s
        if self.clock_offset_s is None or offset > self.clock_offset_s:
            self.clock_offset_s = offset
        now = mono_s + self.clock_offset_s
        del self.recent[:bisect_right(self.recent, (now - RATE_WINDOW_S, 1 << 62))]
        return now, len(self.recent), sum(t for _, t in self.recent)


KEEP_RUNS = 16
"""Runs kept between reads (the newest used; a viewer shows one, an exporter its few)."""
_seen: dict[tuple[str, int], _SoFar] = {}
_lock = threading.Lock()  # the viewer's poll and the exporter's scrapes run in threads


def _so_far(db: Any, run_id: int) -> _SoFar:
    # a file's runs by its path; an in-memory database's by its connection
    key = (main_file(db) or f"memory {id(db)}", run_id)
    got = _seen.pop(key, None)
    if got is None or (got.last_idx >= 0 and serving.scheduled_at(
            db, run_id, got.last_idx) != got.last_scheduled_s):
        got = _SoFar()
    rows = serving.since(db, run_id, got.last_idx)
    if rows:
        got.add(rows)
        got.last_scheduled_s = float(rows[-1]["scheduled_s"])  # what the next read checks
    gens = measured_since(db, run_id, got.last_gen_idx)
    if gens:
        got.add_latencies(gens)
    _seen[key] = got
    while len(_seen) > KEEP_RUNS:
        del _seen[next(iter(_seen))]
    return got


def serve_live(db: Any, run_id: int) -> ServeLive | None:
    """Run ``run_id``'s requests so far (None: not a serve run)."""
    row = jobs.run_specs(db, [run_id]).get(run_id)
    serve, rate = asked_rate(row["spec_json"] if row else None)
    if not serve:
        return None
    with _lock:
        s = _so_far(db, run_id)
        now, recent_ok, recent_tokens = s.recent_at(time.monotonic())
        return ServeLive(rate, s.warmup, s.ok, s.failed, s.in_flight, s.window_s, s.tokens,
                         s.error, s.ttft_s, s.itl_s, now, recent_ok, recent_tokens)
