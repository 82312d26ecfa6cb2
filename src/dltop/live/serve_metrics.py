"""Prometheus families of the serve runs in progress (``dltop_serve_*``, issue 41).

Headless. From each running serve run's requests so far (:mod:`dltop.live.serve_live`),
labelled like its ``dltop_run_*`` values (campaign and slot: ``dltop_run_info`` says which
run) and gone with them when it ends: requests by
status, in flight, the achieved and the asked rate, output tokens/s, and TTFT and
per-token ITL as histograms (cumulative buckets, vLLM's boundaries: docs/serve.md says
why histograms rather than quantiles).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

from dltop.live.metrics import Family, Labels, RunMetrics, family
from dltop.live.serve_live import RATE_WINDOW_S, ServeLive

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
"""vLLM's ``vllm:time_to_first_token_seconds`` boundaries: its dashboards' queries apply."""
ITL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
"""vLLM's ``vllm:inter_token_latency_seconds`` boundaries, with 1, 2.5 and 5 ms added
below its first (10 ms): a small model's token takes a few milliseconds."""


def histogram(name: str, text: str, rows: Sequence[tuple[Labels, Sequence[float]]],
              bounds: Sequence[float]) -> Family:
    """A histogram family: per label set, the cumulative ``_bucket`` counts of its sorted
    values at each bound and ``+Inf``, their ``_sum`` and ``_count``."""
    samples: list[tuple[Labels, float]] = []
    names: list[str] = []
    for labels, values in rows:
        for le in bounds:
            samples.append(({**labels, "le": f"{le:g}"}, float(bisect_right(values, le))))
        samples.append(({**labels, "le": "+Inf"}, float(len(values))))
        samples += [(labels, float(sum(values))), (labels, float(len(values)))]
        names += [f"{name}_bucket"] * (len(bounds) + 1) + [f"{name}_sum", f"{name}_count"]
    return Family(name, "histogram", text, tuple(samples), tuple(names))


def serve_families(runs: Sequence[RunMetrics], hostname: str) -> list[Family]:
    """``dltop_serve_*`` of the serve runs among ``runs`` (none: every family empty)."""
    served = [(r.labels(hostname), r.serve) for r in runs if r.serve is not None]

    def gauge(name: str, text: str, value: Callable[[ServeLive], float | None]) -> Family:
        return family(f"dltop_serve_{name}", "gauge", text,
                      [(lab, value(s)) for lab, s in served])

    return [
        family("dltop_serve_requests_total", "counter", "Measured requests ended so far, by "
               "status (ok: tokens and no error; failed: an HTTP error, a cut or stalled "
               "stream, no tokens).",
               [({**lab, "status": status}, n) for lab, s in served
                for status, n in (("ok", s.ok), ("failed", s.failed))]),
        gauge("warmup_requests", "Warm-up requests ended so far (never measured).",
              lambda s: s.warmup_done),
        gauge("requests_in_flight", "The client's requests in flight when its newest "
              "request ended.", lambda s: s.in_flight),
        gauge("achieved_requests_per_second", f"Ok measured requests per second over the "
              f"last {RATE_WINDOW_S:g} s of the load (0 while none ends).",
              lambda s: s.achieved_rate_per_s),
        gauge("asked_requests_per_second", "The request rate asked (absent for \"inf\").",
              lambda s: s.asked_rate_per_s),
        gauge("output_tokens_per_second", "Output tokens of the ok measured requests per "
              "second of the same window.", lambda s: s.output_tokens_per_s),
        histogram("dltop_serve_ttft_seconds", "Time to first token of the ok measured "
                  "requests so far, from each request's send.",
                  [(lab, s.ttft_s) for lab, s in served], TTFT_BUCKETS_S),
        histogram("dltop_serve_itl_seconds", "Inter-token latency per token (a chunk of k "
                  "tokens spreads its gap over k) of those requests so far.",
                  [(lab, s.itl_s) for lab, s in served], ITL_BUCKETS_S),
    ]
