"""A serve run's charts in the run detail screen (issue 41 item 6): each request's TTFT
and end-to-end latency against its send time, and the TTFT and ITL histograms, from
:mod:`dltop.results.servetrace` as the report's run pages draw them."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from dltop.results.servetrace import Bin, ServeTrace
from dltop.tui.charts import GPU_COLORS, MEASURED_COLOR, ChartSpec

SENT = "s since the load started (send time)"


def _latency(t: ServeTrace) -> ChartSpec:
    failed = f"; {t.failed} failed (not drawn)" if t.failed else ""
    return ChartSpec(f"latency ms per request: TTFT, E2E{failed}", SENT, None, (
        ("TTFT", t.sent_s, [None if v is None else v * 1e3 for v in t.ttft_s],
         MEASURED_COLOR),
        ("E2E", t.sent_s, [None if v is None else v * 1e3 for v in t.e2e_s], GPU_COLORS[1])),
        mark="scatter")


def _hist(title: str, unit: str, bins: tuple[Bin, ...], color: str) -> ChartSpec:
    return ChartSpec(title, unit, None, (
        # centres to 4 digits: plotext writes its ticks as given (27.375000000000004)
        ("", [float(f"{(b.lo_s + b.hi_s) / 2 * 1e3:.4g}") for b in bins],
         [float(b.count) for b in bins], color),), mark="bar")


def serve_charts(t: ServeTrace) -> dict[str, Callable[[], ChartSpec]]:
    """The run's serve charts by name (:data:`dltop.tui.charts.SERVE_CHARTS`)."""
    return {"latency": partial(_latency, t),
            "ttft-hist": partial(_hist, f"TTFT histogram ({len(t.sent_s) - t.failed} ok "
                                 "requests)", "TTFT ms", t.ttft_bins, MEASURED_COLOR),
            "itl-hist": partial(_hist, f"ITL histogram ({t.n_itl} per-token gaps)", "ITL ms",
                                t.itl_bins, GPU_COLORS[0])}
