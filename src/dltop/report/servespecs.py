"""The Vega-Lite spec of a serve run's requests (:func:`dltop.report.serving.serve_run_figures`):
TTFT and end-to-end latency against send time above, the TTFT and ITL histograms below."""

from __future__ import annotations

from typing import Any

from dltop.report.content import Figure
from dltop.report.encode import PALETTE
from dltop.report.vlsize import Size, base


def serverun_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Latency over time (a point per request and latency), then the histograms."""
    rows = [dict(r) for r in fig.rows]
    latency = {"data": {"values": [r for r in rows if r["panel"] == "latency s"]},
               "width": size.width, "height": size.height,
               "mark": {"type": "point", "filled": True, "size": 12},
               "encoding": {
                   "x": {"field": "t", "type": "quantitative", "title": fig.x_title},
                   "y": {"field": "value", "type": "quantitative", "title": "latency s"},
                   "color": {"field": "series", "type": "nominal", "title": None,
                             "scale": {"domain": ["TTFT", "E2E"],
                                       "range": [PALETTE[0], PALETTE[1]]}}}}
    hists = [{"data": {"values": [r for r in rows if r["panel"] == panel]},
              "width": size.width / 2, "height": size.height * 0.8,
              "mark": {"type": "bar", "color": PALETTE[0 if panel == "TTFT ms" else 2]},
              "encoding": {"x": {"field": "lo", "type": "quantitative", "title": panel,
                                 "bin": {"binned": True}},
                           "x2": {"field": "hi"},
                           "y": {"field": "count", "type": "quantitative",
                                 "title": "requests" if panel == "TTFT ms" else "tokens"}}}
             for panel in ("TTFT ms", "ITL ms")
             if any(r["panel"] == panel for r in rows)]
    return {**base(fig, size), "vconcat": [latency, {"hconcat": hists}]}
