"""Horizontal bar specs of the report: power and energy per configuration
(:mod:`dltop.report.energy`) and throughput and energy by precision
(:mod:`dltop.report.precision`), one bar per framework, the runs' min–max as error
bars, on a log axis where a panel's values span more than 100×
(:func:`dltop.report.encode.log_axis`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dltop.report.content import Figure
from dltop.report.encode import colors, log_axis
from dltop.report.vlsize import Size, base

BAR_ROWS = 13
"""Pixels per bar of a horizontal bar chart: its height follows its bars, so many
configurations make a taller figure, never labels printed over each other."""


def _hbars(rows: Sequence[Mapping[str, Any]], title: str, size: Size,
           frameworks: Sequence[str], category: str = "category") -> dict[str, Any]:
    """Horizontal bars of ``rows`` (``value``, ``low``/``high`` error bars), one
    category per row of the axis, one bar per framework within it; the colour (and
    its legend) only when there are several frameworks."""
    cats = list(dict.fromkeys(str(r[category]) for r in rows))
    fws = [f for f in colors(frameworks)["domain"] if any(r["framework"] == f for r in rows)]
    y: dict[str, Any] = {"field": category, "type": "nominal", "title": None, "sort": cats,
                         "axis": {"labelLimit": 0}}  # whole: the figure grows instead
    big = max((abs(float(r["value"])) for r in rows if r.get("value") is not None),
              default=0.0) >= 1000
    # 800k, not 800,000 run together (but 0.1 J, not "100m": SI only for large values)
    x: dict[str, Any] = {"field": "value", "type": "quantitative", "title": title,
                         "axis": {"labelOverlap": "greedy", "labelSeparation": 4,
                                  "tickCount": 6, **({"format": "~s"} if big else {})}}
    if log_axis([r.get("value") for r in rows] + [r.get("low") for r in rows]):
        # values spanning > 100x: on a linear axis the least would be invisible slivers
        x["scale"] = {"type": "log"}
        x["title"] = f"{title} (log scale)"
    enc: dict[str, Any] = {"y": y, "x": x}
    mark: dict[str, Any] = {"type": "bar"}
    if len(fws) > 1:
        enc["yOffset"] = {"field": "framework", "scale": {"domain": fws}}
        enc["color"] = {"field": "framework", "type": "nominal", "title": "framework",
                        "scale": colors(frameworks)}
    else:  # one framework: no legend for a colour that tells nothing apart
        mark["color"] = colors(frameworks)["range"][0] if not fws else \
            colors(frameworks)["range"][colors(frameworks)["domain"].index(fws[0])]
        x["title"] = f"{x['title']} ({fws[0]})" if fws else x["title"]
    rule = {"mark": {"type": "rule", "color": "black"},
            "encoding": {"y": y, "x": {"field": "low", "type": "quantitative",
                                       **({"scale": x["scale"]} if "scale" in x else {})},
                         "x2": {"field": "high"},
                         **({"yOffset": enc["yOffset"]} if "yOffset" in enc else {})}}
    return {"data": {"values": [dict(r) for r in rows]}, "width": size.width,
            "height": BAR_ROWS * max(1, len(cats)) * max(1, len(fws)),
            "layer": [{"mark": mark, "encoding": enc}, rule]}


def energy_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Mean GPU power and energy per sample (token): horizontal bars per configuration,
    one per framework, the runs' min–max as error bars; a row of panels per facet (mode,
    and unit where a mode mixes them, :mod:`dltop.report.energy`), each on its own axes."""
    fws = [str(r["framework"]) for r in fig.rows]
    facets = list(dict.fromkeys(str(r.get("facet", "")) for r in fig.rows))
    out = []
    for facet in facets:
        mine = [r for r in fig.rows if str(r.get("facet", "")) == facet]
        panels = [_hbars(rows, panel, size, fws, category="config") for panel in fig.panels
                  if (rows := [r for r in mine if r["panel"] == panel])]
        cats = [[str(r["config"]) for r in p["data"]["values"]] for p in panels]
        for p, mine_cats in zip(panels[1:], cats[1:], strict=True):
            if list(dict.fromkeys(mine_cats)) == list(dict.fromkeys(cats[0])):
                # the same bars in the same order: the first panel's labels name them
                for layer in p["layer"]:
                    layer["encoding"]["y"] = {**layer["encoding"]["y"],
                                              "axis": {"labels": False, "ticks": False}}
        row: dict[str, Any] = {"hconcat": panels, "resolve": {"scale": {"x": "independent"}}}
        if len(facets) > 1:
            row["title"] = {"text": facet, "anchor": "start", "fontSize": size.font + 1}
        out.append(row)
    if len(out) == 1:
        return {**base(fig, size), **out[0]}
    return {**base(fig, size), "vconcat": out,
            "resolve": {"scale": {"x": "independent", "y": "independent"}}}


def precision_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Per model (and mode): samples/s and J/sample by precision, horizontal bars per
    framework, each row of panels on its own axes (:mod:`dltop.report.precision`)."""
    fws = [str(r["framework"]) for r in fig.rows]
    groups = list(dict.fromkeys((str(r["model"]), str(r["mode"])) for r in fig.rows))
    modes = len({m for _, m in groups}) > 1
    rows_out = []
    for model, mode in groups:
        mine = sorted((r for r in fig.rows if r["model"] == model and r["mode"] == mode),
                      key=lambda r: (r["rank"], str(r["category"])))
        panels = [_hbars([r for r in mine if r["panel"] == p], p, size, fws)
                  for p in fig.panels if any(r["panel"] == p for r in mine)]
        rows_out.append({"title": {"text": model + (f" ({mode})" if modes else ""),
                                   "anchor": "start", "fontSize": size.font + 1},
                         "hconcat": panels, "resolve": {"scale": {"x": "independent"}}})
    return {**base(fig, size), "vconcat": rows_out,
            "resolve": {"scale": {"x": "independent", "y": "independent"}}}
