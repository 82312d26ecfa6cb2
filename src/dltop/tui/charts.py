"""The run detail screen's charts: s/iter, loss and telemetry of one run on one time axis.

Every chart is a ``textual_plotext.PlotextPlot`` with the same x range (seconds since
the run's start, :mod:`dltop.results.runtrace`), so a slow step lines up with the GPU
and CPU readings above and below it. The axis starts a little before the first
iteration (:mod:`dltop.results.tracewindow`): the start-up is a shaded band left of
where iterations start (as in the report's run figures), and the s/iter title says how
long it took; s/iter's y axis fits the
measured steps, slower warm-up steps are drawn clipped at its top (the title counts
them). Warm-up steps are drawn in their own colour with a vertical marker where the
measured iterations start. A pruned run has no times: its measured seconds are drawn by
iteration, and there is no telemetry to draw.

Plotext is slow (about 0.15 ms a point and series), so the figures are built in
thread workers, never on the event loop; each series is cut to one point per
column, and more than four GPUs are drawn as their mean and max.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult, RenderResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from dltop.results.runtrace import GpuPoint, GpuSeries, RunTrace
from dltop.results.tracewindow import window
from dltop.textsafe import one_line
from dltop.tui.workerfail import ShowsWorkerErrors

WARMUP_COLOR = "orange"
MEASURED_COLOR = "cyan"
GPU_COLORS = ("green", "magenta", "blue", "yellow", "red", "cyan", "white", "orange")
HOST_COLOR = "gray"
STARTUP_COLOR = "gray"
STARTUP_MARKER = "░"
"""The start-up band's shading: a light block, under the braille of the lines."""
TREE_COLOR = "orange"
GPU_LINES = 4
"""Most GPUs drawn one line each; more are drawn as their mean and max."""
GIB = 2.0 ** 30
MIB = 2.0 ** 20
SERVE_CHARTS = ("latency", "ttft-hist", "itl-hist")
"""A serve run's charts, below the others (:mod:`dltop.tui.servecharts`)."""
_BUILDING = threading.Lock()


def _thin(xs: Sequence[float], ys: Sequence[float | None], most: int
          ) -> tuple[list[float], list[float]]:
    """Pairs with a value, every k-th kept (and the last) so that at most ``most`` remain."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    k = max(1, -(-len(pts) // max(1, most)))
    kept = [p for i, p in enumerate(pts) if i % k == 0 or i == len(pts) - 1]
    return [p[0] for p in kept], [p[1] for p in kept]


Series = tuple[str, Sequence[float], Sequence[float | None], str]
"""(label, xs, ys, colour); an empty label draws no legend entry."""


@dataclass(frozen=True)
class ChartSpec:
    """What one chart draws (built into text off the event loop)."""

    title: str
    xlabel: str
    xlim: tuple[float, float] | None
    series: tuple[Series, ...]
    vline: float | None = None
    ymin: float | None = 0.0
    ymax: float | None = None
    start: float | None = None
    """Where the iterations start: start-up is the shaded band left of it."""
    mark: str = "line"
    """``line``, ``scatter`` (a point per value) or ``bar`` (a histogram's bins)."""


def build_chart(spec: ChartSpec, width: int, height: int, theme: str) -> Text:
    """The chart as text (plotext, through textual-plotext's ``Plot``); any thread."""
    plt = Plot()
    plt.plotsize(width, height)
    plt._set_size(width, height)  # as PlotextPlot.render: plotsize alone is not kept
    plt.theme(theme)
    plt.title(spec.title[:max(0, width - 4)])  # plotext drops a title wider than the plot
    plt.xlabel(spec.xlabel)
    lo, hi = spec.xlim if spec.xlim is not None else (None, None)
    lines: list[tuple[str, list[float], list[float], str]] = []
    for label, xs, ys, color in spec.series:
        if lo is not None and hi is not None:  # start-up readings lie left of the axis
            keep = [i for i, x0 in enumerate(xs) if lo <= x0 <= hi]
            xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
        x, y = _thin(xs, ys, max(16, width))  # a point per column: plotext costs per point
        if x:
            lines.append((label, x, y, color))
    drawn = bool(lines)
    if drawn and lo is not None and spec.start is not None and spec.start > lo:
        # the band first, so the lines are drawn over it; it spans the data's y range
        # (or the fixed limits), which leaves plotext's own y limits as they were
        values = [v for line in lines for v in line[2]]
        bottom = spec.ymin if spec.ymin is not None else min(values)
        top = spec.ymax if spec.ymax is not None else max(values)
        # plotext annotates x and y as one number; its rectangle takes two corners
        plt.rectangle([lo, spec.start], [bottom, top],  # type: ignore[arg-type]
                      marker=STARTUP_MARKER, color=STARTUP_COLOR, fill=True)
    for label, x, y, color in lines:
        if spec.mark == "bar":
            plt.bar(x, y, color=color, label=label or None, width=0.8)
            ticks = x[::max(1, len(x) // 5)]  # plotext's own bar ticks vary run to run
            plt.xticks(ticks, [f"{t:g}" for t in ticks])
        else:
            getattr(plt, "scatter" if spec.mark == "scatter" else "plot")(
                x, y, marker="braille", color=color, label=label or None)
    if spec.vline is not None:
        plt.vline(spec.vline, WARMUP_COLOR)
    if spec.xlim is not None and spec.xlim[1] > spec.xlim[0]:
        plt.xlim(*spec.xlim)
    if drawn and (spec.ymin is not None or spec.ymax is not None):
        plt.ylim(spec.ymin, spec.ymax)
    return Text.from_ansi(plt.build())


class RunChart(ShowsWorkerErrors, PlotextPlot):
    """One chart; :meth:`draw` replaces its series.

    PlotextPlot builds its figure in ``render``, on the event loop, at every repaint:
    100-250 ms for a chart of several series of a few hundred points. This one builds
    it in a thread worker when its data or size changes and renders the text kept; a
    build that fails says so in the chart's place (and is notified and logged).
    """

    DEFAULT_CSS = "RunChart { height: 1fr; min-height: 8; }"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._spec: Callable[[], ChartSpec] | None = None
        self._version = 0
        self._text: Text | None = None
        self._built: tuple[int, int, int, str] | None = None
        self._asked: tuple[int, int, int, str] | None = None

    @property
    def built(self) -> bool:
        """Whether the text shown is of the latest data at the current size."""
        return self._built is not None and self._built == self._key()

    def draw(self, spec: Callable[[], ChartSpec]) -> None:
        """Show what ``spec`` makes (called in the worker that builds the figure, so
        even the series are computed off the event loop; the old figure stays until
        then)."""
        self._spec, self._version = spec, self._version + 1
        self._schedule()

    def _key(self) -> tuple[int, int, int, str]:
        theme = self._get_plotext_theme_name(self.app.theme)
        return (self._version, self.size.width, self.size.height, theme)

    def _schedule(self) -> None:
        key = self._key()
        if self._spec is None or not key[1] or not key[2] or key in (self._built, self._asked):
            return
        self._asked = key
        self._build(key, self._spec)

    # description: by default Textual repr()s the arguments on the loop (a whole trace)
    @work(thread=True, group="chart", exclusive=True, exit_on_error=False,
          description="chart build")
    def _build(self, key: tuple[int, int, int, str], spec: Callable[[], ChartSpec]) -> None:
        with _BUILDING:  # one figure at a time: several threads would starve the loop
            text = build_chart(spec(), key[1], key[2], key[3])
        self.app.call_from_thread(self._done, key, text)

    def _done(self, key: tuple[int, int, int, str], text: Text) -> None:
        if self._built is None or key[0] >= self._built[0]:
            self._text, self._built = text, key
            self.refresh()

    def show_worker_error(self, text: str) -> None:
        self._text = Text(text, style="red")
        self.refresh()

    def on_resize(self) -> None:
        self._schedule()

    def render(self) -> RenderResult:
        self._schedule()
        return self._text or Text("")


MIN_CHART_ROWS = 8
"""Fewest rows of a chart: below it plotext has no room for a curve between its axes."""


class RunCharts(Vertical):
    """s/iter, loss, CPU/GPU utilisation, GPU power and memory of one run.

    Each shown chart gets an equal share of the rows its :class:`ChartsScroll` shows, and
    at least :data:`MIN_CHART_ROWS` (the rest is scrolled to). Fractional heights would not
    do: inside a scrolling container every ``1fr`` chart took the whole view, so a GPU
    run's five charts stacked five views high and only s/iter was in sight.
    """

    DEFAULT_CSS = """
    RunCharts { height: auto; }
    RunCharts #charts-note { height: auto; color: $text-muted; }
    RunCharts RunChart { height: 8; min-height: 8; }
    RunCharts .-hidden { display: none; }
    """

    rows_available = 0
    """Rows of the view the charts share (set by :class:`ChartsScroll`)."""

    def fit(self, rows: int | None = None) -> None:
        """Share ``rows`` (default: the last known) among the shown charts."""
        if rows is not None:
            self.rows_available = rows
        shown = [c for c in self.query(RunChart) if not c.has_class("-hidden")]
        if not shown or not self.rows_available:
            return
        note = self.query_one("#charts-note", Static)
        free = self.rows_available - (0 if note.has_class("-hidden") else 1)
        each = max(MIN_CHART_ROWS, free // len(shown))
        for chart in shown:
            if chart.styles.height is None or chart.styles.height.value != each:
                chart.styles.height = each

    def compose(self) -> ComposeResult:
        yield Static("", id="charts-note")
        for name in ("iter", "loss", "eval", "util", "power", "memory", *SERVE_CHARTS):
            yield RunChart(id=f"chart-{name}")

    def _chart(self, name: str) -> RunChart:
        return self.query_one(f"#chart-{name}", RunChart)

    def show(self, trace: RunTrace | None, telemetry_reason: str, running: bool = False,
             serving: Mapping[str, Callable[[], ChartSpec]] | None = None) -> None:
        """Draw the trace (None: nothing stored yet); ``telemetry_reason`` says why a run
        without telemetry windows has none; ``serving``: a serve run's charts by name
        (:data:`SERVE_CHARTS`). Only which charts show is decided here; their series
        are computed with the figures, in a worker."""
        its = trace.iterations if trace else ()
        gpus = trace.gpus if trace else ()
        host = trace.host if trace else ()
        notes = []
        if not (gpus or host):
            notes.append(f"telemetry: N/A ({telemetry_reason})")
        if not its:
            notes.append("no iteration stored" + (" yet" if running else ""))
        note = self.query_one("#charts-note", Static)
        note.update(Text(one_line("  ".join(notes))))  # the reason is the run's: literal
        note.set_class(not notes, "-hidden")
        # a serve run's iterations are its requests' end-to-end latencies at their end:
        # its latency chart draws them (at the send), an "s/iter" of them misled
        shown = {"iter": bool(its) and not serving,
                 "loss": trace is not None and trace.has_loss,
                 "eval": trace is not None and bool(trace.evals),
                 "util": bool(gpus or host), "power": bool(gpus),
                 "memory": bool(gpus or host)}
        for name, on in shown.items():
            chart = self._chart(name)
            chart.set_class(not on, "-hidden")
            if on and trace is not None:
                chart.draw(partial(chart_spec, trace, name))
        for name in SERVE_CHARTS:
            spec = (serving or {}).get(name)
            self._chart(name).set_class(spec is None, "-hidden")
            if spec is not None:
                self._chart(name).draw(spec)
        self.fit()


class ChartsScroll(VerticalScroll):
    """The scrolling view of a :class:`RunCharts`: tells it how many rows it shows."""

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        for charts in self.query(RunCharts):
            charts.fit(self.scrollable_content_region.height)


def chart_spec(trace: RunTrace, name: str) -> ChartSpec:
    """Chart ``name`` (iter, loss, util, power, memory) of the trace."""
    its = trace.iterations
    timed = bool(its) and all(p.t_end_s is not None for p in its)
    xlabel = "s since start" if timed or not its else "measured iteration"
    end = trace.duration_s
    # x from just before the first iteration (tracewindow): start-up is left of the
    # gray line, said in the s/iter title, not drawn over most of the axis
    win = window(((p.t_end_s or 0.0, p.seconds, p.warmup) for p in its), end) \
        if timed else None
    xlim = (win.x_start_s, win.x_end_s) if win else (0.0, end) if timed and end else None
    start = win.first_s if win else None
    xs = [p.t_end_s or 0.0 if timed else float(p.idx) for p in its]
    vline = trace.warmup_end_s
    if name == "iter":
        thin = (f" (every {trace.thinned_every}th of {trace.n_iterations})"
                if trace.thinned_every > 1 else "")
        cap = win.y_cap_s if win else None
        warm = [(x, p.seconds) for x, p in zip(xs, its, strict=True) if p.warmup]
        meas = [(x, p.seconds) for x, p in zip(xs, its, strict=True) if not p.warmup]
        notes = ["; warm-up orange"] if warm else []
        if win and cap is not None:
            notes.append(f"; {win.clipped} clipped (max {win.slowest_s:.3g} s)")
        if win:
            notes.append(f"; start-up {win.startup_s:.1f} s (shaded)")

        def clip(v: float) -> float:
            return v if cap is None else min(v, cap)

        return ChartSpec(
            f"s/iter{thin}" + "".join(notes), xlabel, xlim,
            (("", [x for x, _ in warm], [clip(s) for _, s in warm], WARMUP_COLOR),
             ("", [x for x, _ in meas], [clip(s) for _, s in meas], MEASURED_COLOR)), vline,
            ymin=None, ymax=cap, start=start)
    if name == "eval":
        ev = [e for e in trace.evals if e.t_s is not None] if timed else list(trace.evals)
        ex = [e.t_s or 0.0 if timed else float(e.idx) for e in ev]
        if ev and ev[0].accuracy is None:
            return ChartSpec("test perplexity", xlabel, xlim,
                             (("", ex, [e.perplexity for e in ev], MEASURED_COLOR),), vline,
                             ymin=None, start=start)
        return ChartSpec("test accuracy %", xlabel, xlim, (("", ex, [
            None if e.accuracy is None else 100 * e.accuracy for e in ev], MEASURED_COLOR),),
            vline, start=start)
    if name == "loss":
        return ChartSpec("loss", xlabel, xlim,
                         (("", xs, [p.loss for p in its], MEASURED_COLOR),), vline, ymin=None,
                         start=start)
    gpus, host, tx = trace.gpus, trace.host, "s since start"
    hx = [h.t_s for h in host]
    if name == "util":
        return ChartSpec("utilisation %", tx, xlim, _known(
            *gpu_series(gpus, "util %", lambda p: p.util_pct),
            ("host cpu %", hx, [h.cpu_pct for h in host], HOST_COLOR),
            ("tree cpu % (100=1 core)", hx, [h.tree_cpu_pct for h in host], TREE_COLOR)),
            start=start)
    if name == "memory":
        # MiB under a GiB: a CPU run's 36 MiB tree read 0.0059 to 0.0352 GiB
        peak = max((b for b in (*(p.mem_used_bytes for s in gpus for p in s.points),
                                *(h.tree_rss_bytes for h in host)) if b is not None),
                   default=0)
        unit, scale = ("GiB", GIB) if peak >= GIB else ("MiB", MIB)
        return ChartSpec(f"memory {unit}", tx, xlim, _known(
            *gpu_series(gpus, unit, lambda p: None if p.mem_used_bytes is None
                        else p.mem_used_bytes / scale),
            (f"tree RSS {unit}", hx, [None if h.tree_rss_bytes is None
                                      else h.tree_rss_bytes / scale for h in host],
             TREE_COLOR)), start=start)
    return ChartSpec("GPU power W", tx, xlim, _known(
        *gpu_series(gpus, "W", lambda p: p.power_w)), start=start)


def _known(*series: Series) -> tuple[Series, ...]:
    return tuple(s for s in series if any(v is not None for v in s[2]))


def gpu_series(gpus: Sequence[GpuSeries], unit: str,
               value: Callable[[GpuPoint], float | None]) -> list[Series]:
    """One line per GPU, or with more than :data:`GPU_LINES` GPUs their mean and max
    (the windows of every GPU are written together, so they align by index)."""
    if len(gpus) <= GPU_LINES:
        return [(f"{s.label} {unit}", [p.t_s for p in s.points],
                 [value(p) for p in s.points], GPU_COLORS[k % len(GPU_COLORS)])
                for k, s in enumerate(gpus)]
    n = min(len(s.points) for s in gpus)
    xs = [p.t_s for p in gpus[0].points[:n]]
    rows = [[v for s in gpus if (v := value(s.points[i])) is not None] for i in range(n)]
    return [(f"{len(gpus)} GPUs mean {unit}", xs,
             [sum(r) / len(r) if r else None for r in rows], GPU_COLORS[0]),
            (f"max {unit}", xs, [max(r) if r else None for r in rows], GPU_COLORS[1])]
