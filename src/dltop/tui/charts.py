"""The run detail screen's charts: s/iter, loss and telemetry of one run on one time axis.

Every chart is a ``textual_plotext.PlotextPlot`` with the same x range (seconds since
the run's start, :mod:`dltop.results.runtrace`), so a slow step lines up with the GPU
and CPU readings above and below it. Warm-up steps are drawn in their own colour with
a vertical marker where the measured iterations start. A pruned run has no times: its
measured seconds are drawn by iteration, and there is no telemetry to draw.

Plotext builds a chart on every repaint, so each series is cut to a few points per
column before it is handed over (the full thinned trace stays in the screen).
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from dltop.results.runtrace import RunTrace

WARMUP_COLOR = "orange"
MEASURED_COLOR = "cyan"
GPU_COLORS = ("green", "magenta", "blue", "yellow", "red", "cyan", "white", "orange")
HOST_COLOR = "gray"
TREE_COLOR = "orange"


def _thin(xs: Sequence[float], ys: Sequence[float | None], most: int
          ) -> tuple[list[float], list[float]]:
    """Pairs with a value, every k-th kept (and the last) so that at most ``most`` remain."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    k = max(1, -(-len(pts) // max(1, most)))
    kept = [p for i, p in enumerate(pts) if i % k == 0 or i == len(pts) - 1]
    return [p[0] for p in kept], [p[1] for p in kept]


class RunChart(PlotextPlot):
    """One chart; :meth:`draw` replaces its series."""

    DEFAULT_CSS = "RunChart { height: 1fr; min-height: 8; }"

    def draw(self, title: str, xlabel: str, xlim: tuple[float, float] | None,
             series: Sequence[tuple[str, Sequence[float], Sequence[float | None], str]],
             vline: float | None = None, ymin: float | None = 0.0) -> None:
        """``series``: (label, xs, ys, colour); an empty label draws no legend entry."""
        plt = self.plt
        plt.clear_figure()
        plt.title(title)
        plt.xlabel(xlabel)
        most = max(16, 2 * self.size.width) if self.size.width else 400
        drawn = False
        for label, xs, ys, color in series:
            x, y = _thin(xs, ys, most)
            if x:
                drawn = True
                plt.plot(x, y, marker="braille", color=color, label=label or None)
        if vline is not None:
            plt.vline(vline, WARMUP_COLOR)
        if xlim is not None and xlim[1] > xlim[0]:
            plt.xlim(*xlim)
        if drawn and ymin is not None:
            plt.ylim(lower=ymin)
        self.refresh()


class RunCharts(Vertical):
    """s/iter, loss, CPU/GPU utilisation, GPU power and memory of one run."""

    DEFAULT_CSS = """
    RunCharts { height: 1fr; }
    RunCharts #charts-note { height: auto; color: $text-muted; }
    RunCharts .-hidden { display: none; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="charts-note")
        for name in ("iter", "loss", "util", "power", "memory"):
            yield RunChart(id=f"chart-{name}")

    def _chart(self, name: str) -> RunChart:
        return self.query_one(f"#chart-{name}", RunChart)

    def show(self, trace: RunTrace | None, telemetry_reason: str, running: bool = False
             ) -> None:
        """Draw the trace (None: nothing stored yet); ``telemetry_reason`` says why a run
        without telemetry windows has none."""
        its = trace.iterations if trace else ()
        timed = bool(its) and all(p.t_end_s is not None for p in its)
        xlabel = "s since start" if timed or not its else "measured iteration"
        end = trace.duration_s if trace else None
        xlim = (0.0, end) if timed and end else None
        xs = [p.t_end_s or 0.0 if timed else float(p.idx) for p in its]
        thin = (f" (every {trace.thinned_every}th of {trace.n_iterations})"
                if trace and trace.thinned_every > 1 else "")
        warm = [(x, p.seconds) for x, p in zip(xs, its, strict=True) if p.warmup]
        meas = [(x, p.seconds) for x, p in zip(xs, its, strict=True) if not p.warmup]
        self._chart("iter").draw(
            f"s/iter{thin}" + (", warm-up in orange" if warm else ""), xlabel, xlim,
            [("", [x for x, _ in warm], [s for _, s in warm], WARMUP_COLOR),
             ("", [x for x, _ in meas], [s for _, s in meas], MEASURED_COLOR)],
            vline=trace.warmup_end_s if trace else None)
        self._chart("iter").set_class(not its, "-hidden")
        has_loss = trace is not None and trace.has_loss
        self._chart("loss").set_class(not has_loss, "-hidden")
        if has_loss:
            self._chart("loss").draw("loss", xlabel, xlim,
                                     [("", xs, [p.loss for p in its], MEASURED_COLOR)],
                                     vline=trace.warmup_end_s if trace else None, ymin=None)
        gpus = trace.gpus if trace else ()
        host = trace.host if trace else ()
        notes = []
        if not (gpus or host):
            notes.append(f"telemetry: N/A ({telemetry_reason})")
        if not its:
            notes.append("no iteration stored" + (" yet" if running else ""))
        note = self.query_one("#charts-note", Static)
        note.update("  ".join(notes))
        note.set_class(not notes, "-hidden")
        hx = [h.t_s for h in host]
        util = [(f"gpu{s.gpu_index} util %", [p.t_s for p in s.points],
                 [p.util_pct for p in s.points], GPU_COLORS[k % len(GPU_COLORS)])
                for k, s in enumerate(gpus)]
        util += [("host cpu %", hx, [h.cpu_pct for h in host], HOST_COLOR),
                 ("tree cpu % (100=1 core)", hx, [h.tree_cpu_pct for h in host], TREE_COLOR)]
        tel_x = xlim if xlim is not None else None
        for name, shown in (("util", bool(gpus or host)), ("power", bool(gpus)),
                            ("memory", bool(gpus or host))):
            self._chart(name).set_class(not shown, "-hidden")
        if gpus or host:
            self._chart("util").draw("utilisation %", "s since start", tel_x,
                                     [u for u in util if any(v is not None for v in u[2])])
        if gpus:
            self._chart("power").draw("GPU power W", "s since start", tel_x, [
                (f"gpu{s.gpu_index}", [p.t_s for p in s.points],
                 [p.power_w for p in s.points], GPU_COLORS[k % len(GPU_COLORS)])
                for k, s in enumerate(gpus)])
        if gpus or host:
            gib = 2.0 ** 30
            mem = [(f"gpu{s.gpu_index} GiB", [p.t_s for p in s.points],
                    [None if p.mem_used_bytes is None else p.mem_used_bytes / gib
                     for p in s.points], GPU_COLORS[k % len(GPU_COLORS)])
                   for k, s in enumerate(gpus)]
            mem.append(("tree RSS GiB", hx, [None if h.tree_rss_bytes is None
                                             else h.tree_rss_bytes / gib for h in host],
                        TREE_COLOR))
            self._chart("memory").draw("memory GiB", "s since start", tel_x,
                                       [m for m in mem if any(v is not None for v in m[2])])
