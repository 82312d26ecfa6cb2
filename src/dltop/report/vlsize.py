"""The sizes the report's figures are drawn at (screen, paper columns) and the top of
every Vega-Lite spec (:mod:`dltop.report.specs` builds the rest)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dltop.report.content import Figure

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
"""The spec's ``$schema`` (an identifier for readers of the JSON; nothing is fetched)."""

@dataclass(frozen=True)
class Size:
    """Plot area of one panel, font size and legend placement."""

    width: int
    height: int
    font: int
    legend: str = "right"
    title: bool = True
    """Draw the figure's title (the page); a paper's caption carries it instead."""
    fit: bool = False
    """``width`` and ``height`` are the whole figure's, axes and legend included
    (Vega-Lite's ``autosize: fit``; single views only)."""


SCREEN = Size(360, 220, 11)
PAPER_SINGLE = Size(237, 175, 7, "bottom", title=False, fit=True)
"""A 3.3 in (237.6 pt) column, axes and legend included."""
PAPER_DOUBLE_PANEL = Size(200, 110, 7, "bottom", title=False)
"""Each of two side-by-side panels in a 7 in (504 pt) double column."""
PAPER_RUN = Size(440, 55, 7, "bottom", title=False)
"""A run's stacked panels across a 7 in double column."""
POINTS_PER_INCH = 72
"""vl-convert draws 1 px as 1 pt in a PDF: sizes above are points."""


def paper_size(fig: Figure) -> tuple[Size, str]:
    """The paper size of a figure and its width class (``single`` or ``double``)."""
    if fig.kind == "run":
        return PAPER_RUN, "double"
    facets = {(r.get("facet"), r.get("mode")) for r in fig.rows}
    if len(fig.panels) > 1 or fig.kind in ("precision", "scaling") or len(facets) > 1:
        # several views (panels, a facet or mode each): a paper's double column
        return PAPER_DOUBLE_PANEL, "double"
    return PAPER_SINGLE, "single"


def base(fig: Figure, size: Size) -> dict[str, Any]:
    """The top of every spec: schema, white background, fonts and legend for ``size``,
    the title where the size draws it."""
    # labelLimit 0: a legend's labels whole, never cut to "...cuda graphs 200 it 20 war…"
    spec: dict[str, Any] = {
        "$schema": SCHEMA, "background": "white", "padding": 4,
        "config": {"font": "sans-serif", "view": {"stroke": "#ddd"},
                   "axis": {"labelFontSize": size.font, "titleFontSize": size.font,
                            "titleFontWeight": "normal"},
                   "legend": {"labelFontSize": size.font, "titleFontSize": size.font,
                              "orient": size.legend, "labelLimit": 0,
                              "columns": 3 if size.legend == "bottom" else 1},
                   "header": {"labelFontSize": size.font, "titleFontSize": size.font},
                   "title": {"fontSize": size.font + 2, "anchor": "start",
                             "subtitleFontSize": size.font}}}
    if size.title:
        spec["title"] = {"text": fig.title}
    if size.fit:
        spec["autosize"] = {"type": "fit", "contains": "padding"}
    return spec
