"""Vega-Lite specs of the report's figures, and their rendering by vl-convert.

One spec per :class:`~dltop.report.content.Figure`, at a :class:`Size`: the
screen size of the HTML page, or a paper size (3.3 in single column, 7 in
double, fonts at 7 pt) for ``--figures``. The same spec gives the inline SVG
and the PNG/PDF files, so the page and the paper never disagree.
:func:`render` imports vl-convert (Vega in an embedded Deno, which starts on
the first render, 1-2 s) only when a figure is drawn, and lets it fetch
nothing: every spec carries its data inline.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from dltop import catalog
from dltop.report.barspecs import energy_spec, precision_spec
from dltop.report.content import Figure
from dltop.report.encode import PALETTE, color_domain, colors, log_axis
from dltop.report.servespecs import serverun_spec
from dltop.report.vlsize import SCREEN, Size, base
from dltop.results.tracewindow import HEADROOM, TimeWindow, window

DASH = [4, 3]
STARTUP_FILL = "#d9d9d9"
"""The start-up band of a run figure (darker than the warm-up shading)."""
CLIPPED_COLOR = "#e45756"


def _values(rows: Sequence[Mapping[str, Any]], **match: str) -> dict[str, Any]:
    return {"values": [dict(r) for r in rows
                       if all(r.get(k) == v for k, v in match.items())]}


def _x(fig: Figure, field: str, *, log: bool = False,
       rows: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    xs = sorted({r[field] for r in (fig.rows if rows is None else rows) if field in r})
    scale: dict[str, Any] = {"type": "log", "base": 2} if log else {"zero": False}
    return {"field": field, "type": "quantitative", "title": fig.x_title, "scale": scale,
            "axis": {"values": xs, "format": "d"}}


def _lines(fig: Figure, rows: Sequence[Mapping[str, Any]], x: dict[str, Any], y: str,
           y_title: str, size: Size, *, bars: bool = False, zero: bool = True,
           variants: Collection[str] | None = None) -> dict[str, Any]:
    """Lines (or points) of ``rows``; ``variants``: the dash and shape domain shared by
    panels side by side (a panel missing one variant must not shift the others' dashes),
    else the rows' own."""
    color = _color(fig)
    if len(color["scale"]["domain"]) < 2:  # one value: a legend would tell nothing apart
        color["legend"] = None
    scale: dict[str, Any] = {"zero": zero}
    if log_axis([r.get(y) for r in rows]):  # spans > 100x: linear would flatten the least
        scale = {"type": "log"}
    enc = {"x": x, "y": {"field": y, "type": "quantitative", "title": y_title,
                         "scale": scale},
           "color": color, "detail": {"field": "series"},
           "strokeDash": {"field": "variant", "type": "nominal", "title": None,
                          "legend": {"symbolType": "stroke", "symbolStrokeColor": "black",
                                     "symbolStrokeWidth": 1.5}}}
    if size.legend == "bottom":  # beside the framework legend it would not fit a column
        enc["strokeDash"]["legend"].update(orient="top", direction="horizontal")
    domain = sorted(set(variants) if variants is not None
                    else {str(r.get("variant", "")) for r in rows})
    enc["strokeDash"]["scale"] = {"domain": domain}
    if len(domain) < 2:
        del enc["strokeDash"]
    # the points are their own layer: a line with point=True draws its strokeDash legend
    # with filled circles, hiding the dashes
    dots = {k: v for k, v in enc.items() if k != "strokeDash"}
    counts: dict[Any, int] = {}
    for r in rows:
        counts[r.get("series")] = counts.get(r.get("series"), 0) + 1
    lines = any(n > 1 for n in counts.values())
    if not lines and "strokeDash" in enc:
        # every series is one point: no line draws a dash, so the variant is a shape
        dots["shape"] = {"field": "variant", "type": "nominal", "title": None,
                         "scale": {"domain": domain}}
    layers: list[dict[str, Any]] = [{"mark": {"type": "point", "filled": True},
                                     "encoding": dots}]
    if lines:
        layers[:0] = [{"mark": {"type": "line"}, "encoding": enc}]
    if bars:
        layers.append({"mark": {"type": "rule"}, "encoding": {
            "x": x, "y": {"field": "low", "type": "quantitative", "scale": scale},
            "y2": {"field": "high"}, "color": color, "detail": {"field": "series"}}})
    if lines:
        layers += _point_labels(rows, counts, x, enc["y"], size)
    return {"data": {"values": [dict(r) for r in rows]}, "width": size.width,
            "height": size.height, "layer": layers}


def _point_labels(rows: Sequence[Mapping[str, Any]], counts: Mapping[Any, int],
                  x: dict[str, Any], y: dict[str, Any], size: Size) -> list[dict[str, Any]]:
    """A text mark beside each point whose series has no other (a CUDA-graph run at one
    batch among lines): no line draws its dash, so its legend entry would name nothing
    on the plot."""
    lone = [{**r, "label": str(r.get("variant") or r.get("series") or "")}
            for r in rows if counts.get(r.get("series")) == 1]
    if not lone:
        return []
    return [{"data": {"values": lone},
             "mark": {"type": "text", "align": "left", "dx": 6, "dy": -6,
                      "fontSize": max(6, size.font - 1), "color": "#333"},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}}}]


def _color(fig: Figure) -> dict[str, Any]:
    """The colour of a line figure: the framework, or the field its encoding colours
    (:mod:`dltop.report.encode`: ``precision`` when one framework varies it)."""
    field = str(fig.extra.get("color", "framework"))
    if field == "framework":
        return {"field": "framework", "type": "nominal", "title": "framework",
                "scale": colors([str(r["framework"]) for r in fig.rows])}
    domain = color_domain(field, [str(r["color"]) for r in fig.rows])
    return {"field": "color", "type": "nominal", "title": field,
            "scale": {"domain": domain,
                      "range": [PALETTE[i % len(PALETTE)] for i in range(len(domain))]}}


def _facets(fig: Figure, size: Size, draw: Any) -> dict[str, Any]:
    """The figure drawn by ``draw(rows)`` (a view, or views side by side), once per facet
    (:mod:`dltop.report.encode`: a mode, a precision) stacked, each on its own axes."""
    ranked = sorted(fig.rows, key=lambda r: int(r.get("facet_rank", 0)))  # train first
    facets = list(dict.fromkeys(str(r.get("facet", "")) for r in ranked))
    if len(facets) < 2:
        return {**base(fig, size), **draw(fig.rows)}
    return {**base(fig, size), "vconcat": [
        {"title": {"text": facet, "anchor": "start", "fontSize": size.font + 1},
         **draw([r for r in fig.rows if str(r.get("facet", "")) == facet])}
        for facet in facets]}


def devices_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Median s/iter (a serve model's: median e2e s per request, ``y_title``) vs devices
    per framework (and batch), min–max error bars; a row of axes per facet (mode,
    precision)."""
    return _facets(fig, size, lambda rows: _lines(
        fig, rows, _x(fig, "devices", rows=rows), "seconds",
        str(fig.extra.get("y_title", "median s/iter")), size, bars=True))


def scaling_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Speedup and efficiency vs devices side by side, each with its ideal dashed; a
    row of both per facet (mode, precision)."""
    return _facets(fig, size, lambda rows: _scaling_pair(fig, rows, size))


def _scaling_pair(fig: Figure, rows: Sequence[Mapping[str, Any]], size: Size
                  ) -> dict[str, Any]:
    top = max((int(r["devices"]) for r in rows), default=2)
    x = _x(fig, "devices", rows=rows)
    speed = _lines(fig, rows, x, "speedup", "speedup (×)", size)
    ideal = {"data": {"values": [{"devices": 1, "ideal": 1}, {"devices": top, "ideal": top}]},
             "mark": {"type": "line", "strokeDash": DASH, "color": "#888"},
             "encoding": {"x": x, "y": {"field": "ideal", "type": "quantitative"}}}
    speed["layer"] = [ideal, *speed["layer"]]  # the ideal line drawn first, under the data
    eff = _lines(fig, rows, x, "efficiency", "efficiency", size)
    eff["layer"][0]["encoding"]["y"]["axis"] = {"format": "%"}
    eff["layer"] = [{"mark": {"type": "rule", "strokeDash": DASH, "color": "#888"},
                     "encoding": {"y": {"datum": 1}}}, *eff["layer"]]
    return {"hconcat": [speed, eff], "resolve": {"scale": {"x": "shared"}}}


def batch_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Throughput (min–max error bars) and GPU memory vs batch size, side by side; with
    training and inference (or generation) configurations, each mode on its own axes
    (a training step and an inference step are not the same work)."""
    modes = sorted(dict.fromkeys(str(r.get("mode", "")) for r in fig.rows),
                   key=lambda m: catalog.MODES.index(m) if m in catalog.MODES else 99)
    by_mode = []  # training first, as every figure's facets
    for mode in modes:  # a row of panels per mode: a paper's column keeps its width
        panels = []
        for p in fig.panels:
            rows = [r for r in _values(fig.rows, panel=p)["values"]
                    if str(r.get("mode", "")) == mode]
            if rows:
                title = f"{p} ({mode})" if len(modes) > 1 else p
                # error bars where the rows carry them (samples/s; generation latencies)
                # ticks at this mode's batches: another mode's would crowd its axis
                x = _x(fig, "batch", log=True,
                       rows=[r for r in fig.rows if str(r.get("mode", "")) == mode])
                variants = {str(r.get("variant", "")) for r in fig.rows
                            if str(r.get("mode", "")) == mode}
                panels.append(_lines(fig, rows, x, "value", title, size, variants=variants,
                                     bars=any("low" in r for r in rows)))
        by_mode.append(panels)
    if len(by_mode) > 1:
        return {**base(fig, size), "vconcat": [{"hconcat": p} for p in by_mode]}
    panels = by_mode[0] if by_mode else []
    if len(panels) == 1:  # a single view: it can be fitted to a column
        return {**base(fig, size), **panels[0]}
    return {**base(fig, size), "hconcat": panels}


def prompt_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """TTFT p50 vs prompt length per framework (generate runs), the runs' p50 min–max as
    error bars (:mod:`dltop.report.generation`)."""
    return {**base(fig, size), **_lines(fig, fig.rows, _x(fig, "prompt_tokens", log=True),
                                         "value", fig.panels[0], size, bars=True)}


def serving_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Serving panels side by side (:mod:`dltop.report.serving`): a line per engine with
    min–max error bars, a client-bound point ringed in red."""
    panels = []
    for p in fig.panels:
        rows = _values(fig.rows, panel=p)["values"]
        x = {"field": "x", "type": "quantitative", "title": fig.x_title,
             "scale": {"zero": False}}
        view = _lines(fig, rows, x, "value", p, size, bars=True)
        bound = [r for r in rows if r.get("client_bound")]
        if bound:
            view["layer"].append({"data": {"values": bound}, "mark": {
                "type": "point", "size": 120, "color": CLIPPED_COLOR, "strokeWidth": 1.5},
                "encoding": {"x": x, "y": {"field": "value", "type": "quantitative"}}})
        panels.append(view)
    if len(panels) == 1:
        return {**base(fig, size), **panels[0]}
    return {**base(fig, size), "hconcat": panels}


def _run_window(fig: Figure, xf: str) -> TimeWindow | None:
    """The run's :func:`~dltop.results.tracewindow.window`, from its s/iter rows (a row's
    x is its iteration's end); None for a run drawn by iteration (pruned)."""
    if xf != "t":
        return None
    its = [(float(r["t"]), float(r["value"]), r.get("series") == "warm-up")
           for r in fig.rows if r.get("panel") == "s/iter"]
    ends = [float(r["t"]) for r in fig.rows if r.get("t") is not None]
    return window(its, max(ends, default=None))


def _startup_layers(win: TimeWindow) -> list[dict[str, Any]]:
    """The start-up band left of the first iteration."""
    return [{"data": {"values": [{"a": win.x_start_s, "b": win.first_s}]},
             "mark": {"type": "rect", "color": STARTUP_FILL},
             "encoding": {"x": {"field": "a", "type": "quantitative"},
                          "x2": {"field": "b"}}}]


def _clipped_layers(win: TimeWindow, panel_rows: list[dict[str, Any]], xf: str,
                    x: dict[str, Any], y: dict[str, Any]) -> list[dict[str, Any]]:
    """Steps above the s/iter axis: a triangle at its top, labelled with their time."""
    cap = win.y_cap_s
    over = [{xf: r[xf], "value": cap, "text": f"{float(r['value']):.3g} s"}
            for r in panel_rows if cap is not None and float(r["value"]) > cap]
    if not over:
        return []
    return [{"data": {"values": over}, "mark": {"type": "point", "shape": "triangle-up",
                                                 "filled": True, "color": CLIPPED_COLOR,
                                                 "size": 30},
             "encoding": {"x": x, "y": y}},
            {"data": {"values": over}, "mark": {"type": "text", "align": "left", "dx": 5,
                                                 "dy": 6, "fontSize": 9,
                                                 "color": CLIPPED_COLOR},
             "encoding": {"x": x, "y": y, "text": {"field": "text"}}}]


def run_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """A run's panels stacked on one time axis, warm-up shaded on each.

    The axis starts just before the first iteration, start-up a band left of it
    (its length in the axis title), and s/iter's y axis fits the measured steps: a
    slower warm-up step is drawn at its top, marked with a triangle and its time
    (:mod:`dltop.results.tracewindow`).
    """
    xf = str(fig.extra.get("x_field", "t"))
    warm = fig.extra.get("warmup_end_s")
    win = _run_window(fig, xf)
    x_title = fig.x_title
    if win is not None and win.startup_s > 0:
        x_title += f" (start-up before the first iteration: {win.startup_s:.1f} s, shaded left)"
    panels = []
    for i, panel in enumerate(fig.panels):
        x: dict[str, Any] = {"field": xf, "type": "quantitative", "scale": {"zero": False},
                             "title": x_title if i == len(fig.panels) - 1 else None}
        if win is not None:
            x["scale"] = {"domain": [win.x_start_s, win.x_end_s], "nice": False}
        color: dict[str, Any] = {"field": "series", "type": "nominal", "title": None}
        if panel == "s/iter":
            color["scale"] = {"domain": ["warm-up", "measured"], "range": ["#999", PALETTE[0]]}
        elif len({r.get("series") for r in fig.rows if r.get("panel") == panel}) < 2:
            color["legend"] = None  # one line: the axis title names it
        mark: dict[str, Any] = {"type": "line", "point": {"size": 8}} if panel == "s/iter" \
            else {"type": "line"}
        layers: list[dict[str, Any]] = _startup_layers(win) if win is not None else []
        if warm is not None:
            start = float(fig.extra.get("warmup_start_s") or 0.0)
            layers.append({"data": {"values": [{"a": start, "b": float(warm)}]},
                           "mark": {"type": "rect", "color": "#eee"},
                           "encoding": {"x": {"field": "a", "type": "quantitative"},
                                        "x2": {"field": "b"}}})
        rows = _values(fig.rows, panel=panel)["values"]
        y: dict[str, Any] = {"field": "value", "type": "quantitative", "title": panel,
                             "scale": {"zero": panel != "s/iter" and panel != "loss"}}
        cap = win.y_cap_s if win is not None and panel == "s/iter" else None
        if cap is not None:
            low = min(float(r["value"]) for r in rows)
            y["scale"] = {"domain": [low / HEADROOM, cap], "clamp": True, "nice": False}
        layers.append({"data": {"values": rows}, "mark": {**mark, "clip": True},
                       "encoding": {"x": x, "y": y, "color": color}})
        if cap is not None and win is not None:
            layers += _clipped_layers(win, rows, xf, x, y)
        for layer in layers:  # start-up readings lie left of the axis: not drawn
            if isinstance(layer["mark"], dict):
                layer["mark"]["clip"] = True
            # every layer names the domain: a shared scale unions the layers' domains,
            # and one without it would stretch the axis back to the run's start
            if win is not None and "scale" not in layer["encoding"]["x"]:
                layer["encoding"]["x"] = {**layer["encoding"]["x"], "scale": x["scale"]}
        panels.append({"width": size.width, "height": size.height, "layer": layers})
    return {**base(fig, size), "vconcat": panels,
            "resolve": {"scale": {"x": "shared", "color": "independent"},
                        "legend": {"color": "independent"}}}


def profile_spec(fig: Figure, size: Size) -> dict[str, Any]:
    """Horizontal bars: ms per step of each operator, self CPU beside self device time
    (:mod:`dltop.report.profiles`)."""
    return {**base(fig, size), "data": {"values": [dict(r) for r in fig.rows]},
            "width": size.width, "mark": {"type": "bar"},
            "encoding": {
                "y": {"field": "op", "type": "nominal", "title": None,
                      "sort": {"field": "rank", "order": "ascending"}},
                "yOffset": {"field": "time"},
                "x": {"field": "ms", "type": "quantitative", "title": fig.x_title},
                "color": {"field": "time", "type": "nominal", "title": None,
                          "scale": {"domain": ["self CPU", "self device"],
                                    "range": [PALETTE[0], PALETTE[1]]}}}}


BUILDERS = {"devices": devices_spec, "scaling": scaling_spec, "batch": batch_spec,
            "energy": energy_spec, "run": run_spec, "profile": profile_spec,
            "prompt": prompt_spec, "precision": precision_spec, "serving": serving_spec,
            "serverun": serverun_spec}


def spec(fig: Figure, size: Size = SCREEN) -> dict[str, Any]:
    """The Vega-Lite spec of a drawn figure at ``size``.

    Raises:
        ValueError: the figure is omitted (nothing to draw) or of an unknown kind.
    """
    if fig.omitted:
        raise ValueError(f"{fig.key} is omitted: {fig.omitted}")
    builder = BUILDERS.get(fig.kind)
    if builder is None:
        raise ValueError(f"unknown figure kind {fig.kind!r}")
    return builder(fig, size)


FORMATS = ("svg", "png", "pdf")
PNG_PPI = 300


def render(vl_spec: Mapping[str, Any], fmt: str) -> bytes:
    """``vl_spec`` drawn as ``svg`` (UTF-8), ``png`` (300 ppi) or ``pdf``; offline.

    Raises:
        ValueError: an unknown format.
    """
    import vl_convert as vlc  # Deno and Vega: only when a figure is drawn

    offline: dict[str, Any] = {"allowed_base_urls": []}
    if fmt == "svg":
        return str(vlc.vegalite_to_svg(dict(vl_spec), **offline)).encode()
    if fmt == "png":
        # ppi alone scales the image (1 pt = ppi/72 px) and records the resolution
        return bytes(vlc.vegalite_to_png(dict(vl_spec), ppi=PNG_PPI, **offline))
    if fmt == "pdf":
        return bytes(vlc.vegalite_to_pdf(dict(vl_spec), **offline))
    raise ValueError(f"unknown figure format {fmt!r}: use one of {', '.join(FORMATS)}")
