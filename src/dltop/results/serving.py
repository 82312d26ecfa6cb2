"""Serving metrics (``mode = "serve"``, issue 41), all from the stored requests.

A serve run's requests are ``serve_requests`` rows (:mod:`dltop.store.serving`); its
successful ones are also ``generations`` rows, so TTFT, TPOT, per-token ITL and
latency are the generation metrics (:mod:`dltop.results.generation`). What only a
load shows is here, per configuration over its ok runs (docs/metrics.md, "Serving"):

- **req-rate**: ok measured requests / the measured window (first scheduled arrival to
  the last response's end), the median over runs; beside it the rate asked.
- **output-rate**: output tokens of those requests / the window, median over runs.
- **goodput**: requests per second meeting every SLO the profile gives
  (``slo_ttft_ms``, ``slo_tpot_ms``, ``slo_e2e_ms``), median over runs.
- **error-rate**: failed measured requests / measured requests, in %, all runs together
  (a run above ``max_error_rate`` failed: its requests count in no ok run).
- **itl-chunk**: every gap between successive content chunks, p50/p90/p99 (a chunk of
  k tokens is one gap here, k equal ones in the per-token ``itl``).
- **dispatch-lag**, **slot-wait**: p50/p90/p99 over the measured requests (p90 and p99
  only from enough of them: :func:`dltop.results.convergence.min_samples`).
- **client-cpu**: the client's CPU over the window, 100 = one core, mean over runs.
- **cached-share**: the prompt tokens the server served from its prefix cache
  (``usage.prompt_tokens_details.cached_tokens``) / the prompt tokens of the ok measured
  requests whose usage gave both, in %; n/a where the server gave none.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dltop.results.convergence import percentiles
from dltop.store.read import serving
from dltop.telemetry.values import opt_float

if TYPE_CHECKING:
    from dltop.store.reader import Db

SLO_KEYS = (("slo_ttft_ms", "ttft"), ("slo_tpot_ms", "tpot"), ("slo_e2e_ms", "e2e"))


@dataclass(frozen=True)
class ServeRequest:
    """One measured request of a serve run (a ``serve_requests`` row)."""

    idx: int
    ttft_s: float | None
    e2e_s: float | None
    status: int
    error: str | None
    output_tokens: int
    tokens_estimated: bool
    dispatch_lag_s: float
    slot_wait_s: float
    chunk_s: tuple[float, ...]
    sent_s: float = 0.0
    """When the send it answered left, from the start of the load: scheduled + dispatch lag
    + slot wait + the time its earlier sends took (one closed before any byte)."""
    chunk_tokens: tuple[int, ...] = ()
    prompt_tokens: int | None = None
    """The prompt's tokens by the server's usage (None where it gave none)."""
    cached_tokens: int | None = None
    """Of them, those it served from its prefix cache, where its usage said (migration 37)."""

    @property
    def ok(self) -> bool:
        """It ended without an error, with tokens."""
        return self.error is None and self.output_tokens >= 1 and self.ttft_s is not None

    @property
    def tpot_s(self) -> float | None:
        """``(e2e - TTFT) / (output tokens - 1)`` (vLLM's); None with one token."""
        if not self.ok or self.e2e_s is None or self.ttft_s is None \
                or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def meets(self, slo_s: dict[str, float]) -> bool:
        """Ok, and within every SLO given (seconds, by ``ttft``/``tpot``/``e2e``)."""
        if not self.ok:
            return False
        got = {"ttft": self.ttft_s, "tpot": self.tpot_s, "e2e": self.e2e_s}
        for key, bound in slo_s.items():
            value = got[key]
            if value is None and key == "tpot":  # one token: no TPOT to miss
                continue
            if value is None or value > bound:
                return False
        return True


def serve_requests_of(db: Db, run_ids: Sequence[int]) -> dict[int, list[ServeRequest]]:
    """Each run's measured requests in schedule order (runs without any left out);
    ``idx`` is the request's place in the schedule."""
    return {rid: [ServeRequest(
        int(r["request"]), opt_float(r["ttft_s"]), opt_float(r["e2e_s"]), int(r["status"] or 0),
        r["error"], int(r["output_tokens"] or 0), bool(r["tokens_estimated"]),
        float(r["dispatch_lag_s"] or 0.0), float(r["slot_wait_s"] or 0.0), r["chunk_s"],
        float(r["scheduled_s"] or 0.0) + float(r["dispatch_lag_s"] or 0.0)
        + float(r["slot_wait_s"] or 0.0) + float(r["resend_s"]), r["chunk_tokens"],
        r["prompt_tokens"], r["cached_tokens"])
        for r in rows] for rid, rows in serving.requests(db, run_ids).items()}


def slos(identity: Mapping[str, Any]) -> dict[str, float]:
    """The SLOs a configuration's options give, in seconds by metric (a result's identity
    holds its options as keys of their own; a job's has them under ``options``)."""
    opts = identity.get("options") or identity
    return {name: float(opts[key]) / 1000.0 for key, name in SLO_KEYS
            if opts.get(key) is not None}


class ServedRun(Protocol):
    """A run as these metrics read it (a ``RunRecord``): its columns and its requests."""

    @property
    def fields(self) -> dict[str, Any]: ...
    @property
    def serving(self) -> tuple[ServeRequest, ...]: ...


class Served(Protocol):
    """A configuration as these metrics read it (a ``ConfigResult``)."""

    @property
    def runs(self) -> tuple[ServedRun, ...]: ...
    @property
    def identity(self) -> Mapping[str, Any]: ...


Numbers = tuple[float | None, str, dict[str, float | None]]
"""(value, why there is none, detail) of one serving metric for a configuration."""


def _rate(count: Callable[[ServedRun, dict[str, float]], float], asked: bool = False,
          needs_slo: bool = False) -> Callable[[Served, list[ServeRequest]], Numbers]:
    """Median over the runs of ``count`` (given the configuration's SLOs) per second of
    each run's measured window, with the runs' lowest and highest where there are
    several; ``asked``: the rate the profile asked, beside it."""
    def numbers(res: Served, _reqs: list[ServeRequest]) -> Numbers:
        detail: dict[str, float | None] = {}
        if asked and isinstance(rate := res.identity.get("request_rate"), int | float):
            detail["asked"] = float(rate)
        slo = slos(res.identity)
        if needs_slo and not slo:
            return None, "n/a: no SLO given (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)", {}
        rates = [count(r, slo) / float(window) for r in res.runs
                 if (window := r.fields.get("serve_window_s")) and r.serving]
        if len(rates) > 1:  # the runs' spread beside their median
            detail.update(runs=float(len(rates)), min=min(rates), max=max(rates))
        return (statistics.median(rates) if rates else None), "n/a: no window", detail
    return numbers


def _spread(of: Callable[[list[ServeRequest]], list[float]],
            ) -> Callable[[Served, list[ServeRequest]], Numbers]:
    """p50 (p90, p99 and n in the detail) of what ``of`` takes from the requests."""
    def numbers(_res: Served, reqs: list[ServeRequest]) -> Numbers:
        values = of(reqs)
        p = percentiles(values)
        if p is None:
            return None, "n/a: one chunk per request", {}
        return p[0], "", {"p50_s": p[0], "p90_s": p[1], "p99_s": p[2], "n": float(len(values))}
    return numbers


def _error_rate(_res: Served, reqs: list[ServeRequest]) -> Numbers:
    failed = sum(not q.ok for q in reqs)
    return 100.0 * failed / len(reqs), "", {"failed": float(failed), "n": float(len(reqs))}


def _client_cpu(res: Served, _reqs: list[ServeRequest]) -> Numbers:
    cpus = [float(v) for r in res.runs if (v := r.fields.get("client_cpu_pct")) is not None]
    return (statistics.fmean(cpus) if cpus else None), "n/a: not measured", {}


def _cached_share(_res: Served, reqs: list[ServeRequest]) -> Numbers:
    # Only the ok requests whose usage gave both counts: a server that says nothing of its
    # cache is n/a, never 0 % (vLLM says nothing without --enable-prompt-tokens-details).
    said = [q for q in reqs if q.ok and q.prompt_tokens and q.cached_tokens is not None]
    if not said:
        return None, "n/a: the server's usage gave no cached_tokens " \
            "(prompt_tokens_details)", {}
    prompt = sum(q.prompt_tokens or 0 for q in said)
    cached = sum(q.cached_tokens or 0 for q in said)
    ok = sum(q.ok for q in reqs)
    return 100.0 * cached / prompt, "", {"cached": float(cached), "prompt": float(prompt),
                                         "said": float(len(said)), "n": float(ok)}


SERVING_NUMBERS: dict[str, Callable[[Served, list[ServeRequest]], Numbers]] = {
    "req-rate": _rate(lambda r, _: sum(q.ok for q in r.serving), asked=True),
    "output-rate": _rate(lambda r, _: sum(q.output_tokens for q in r.serving if q.ok)),
    "goodput": _rate(lambda r, slo: sum(q.meets(slo) for q in r.serving), needs_slo=True),
    "error-rate": _error_rate,
    "client-cpu": _client_cpu,
    "cached-share": _cached_share,
    "itl-chunk": _spread(lambda reqs: [b - a for q in reqs if q.ok
                                       for a, b in itertools.pairwise(q.chunk_s)]),
    "dispatch-lag": _spread(lambda reqs: [q.dispatch_lag_s for q in reqs]),
    "slot-wait": _spread(lambda reqs: [q.slot_wait_s for q in reqs]),
}
"""Each serving metric's numbers over a serve configuration's measured requests (the
metric's declaration is in :mod:`dltop.results.metricdefs`)."""


def serving_numbers(res: Served, name: str) -> Numbers:
    """(value, why none, detail) of serving metric ``name`` for a configuration."""
    mode = res.identity.get("mode", "train")
    if mode != "serve":  # the latency metric's words for the other runs
        return None, "n/a: training run" if mode == "train" else f"n/a: {mode} run", {}
    reqs = [q for r in res.runs for q in r.serving]
    if not reqs:
        return None, "n/a: no serve requests stored", {}
    return SERVING_NUMBERS[name](res, reqs)
