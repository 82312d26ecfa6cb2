"""Device widgets: one row per GPU and one for the host, each with its history.

Graphs fill the row: what the fixed fields leave of the widget's width goes to
them, and they show as many of the newest readings as they have columns. Each
reading is turned into its block character once, when it arrives (the scales
are fixed: 0-100 % and 0 to the power limit), so drawing a 150-column graph
at 4 Hz is a join of stored characters, not a computation.
"""

from __future__ import annotations

import math
import time
from collections import deque
from itertools import islice

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from dltop.live.devices import DeviceFrame, RemoteGpu, throttle_text
from dltop.telemetry.values import GpuSample, GpuStatic, HostSample
from dltop.textsafe import one_line
from dltop.tui.format import BLOCKS, NA, gib, num, sparkline
from dltop.tui.partsline import Parts, PartsLines
from dltop.tui.quietdraw import CachedLines, Pane

STALE_S = 10.0
"""A remote GPU whose newest window is older than this says how old it is."""
HISTORY = 1200
"""Readings kept per graph: 5 minutes at 4 Hz, more than the widest screen's columns."""
GPU_FIXED = 47
"""Columns of a GPU row's figures (no name, no graph) before its first reading."""
HOST_FIXED = 44
"""Columns of the host row that are neither core bars nor its graph."""
MIN_HOST_GRAPH = 8
"""The host's CPU history is drawn only when at least this many columns are left."""


def _short_name(name: str) -> str:
    return one_line(name.replace("NVIDIA ", "").replace("GeForce ", ""))[:14]


def block(value: float | None, hi: float | None) -> str:
    """One reading on a 0..``hi`` scale as a block character (a space when missing)."""
    if value is None or hi is None or hi <= 0 or not math.isfinite(value):
        return " "
    frac = max(0.0, min(1.0, value / hi))
    return BLOCKS[1 + round(frac * (len(BLOCKS) - 2))]


class History:
    """A ring buffer of readings drawn as block characters on a fixed scale."""

    def __init__(self, hi: float | None, size: int = HISTORY) -> None:
        self.hi = hi
        self.chars: deque[str] = deque(maxlen=size)

    def push(self, value: float | None) -> None:
        """Add one reading."""
        self.chars.append(block(value, self.hi))

    def draw(self, width: int) -> str:
        """The newest ``width`` readings, right-aligned in ``width`` columns."""
        if width <= 0:
            return ""
        # from the newest end: a narrow graph does not walk the whole buffer
        newest = list(islice(reversed(self.chars), width))
        newest.reverse()
        return "".join(newest).rjust(width)


def split_graphs(width: int, fixed: int) -> tuple[int, int]:
    """(utilization, power) graph columns of a GPU row ``width`` wide: two thirds and one
    third of what its ``fixed`` columns of text leave."""
    free = max(6, width - fixed)
    util = max(4, free * 2 // 3)
    return util, max(2, free - util)


class GpuRow:
    """One GPU's line: utilization and power graphs, memory, power, temperature, clock,
    throttling (drawn by :class:`DeviceLines` with the other devices' lines)."""

    sample: GpuSample | None = None
    """The newest reading."""

    def __init__(self, static: GpuStatic) -> None:
        self.static = static
        self.util_hist = History(100.0)
        self.power_hist: deque[float | None] = deque(maxlen=HISTORY)
        # Power is drawn on the GPU's limit; without one, from the numbers (rare).
        self.power_chars = History(static.power_limit_w) if static.power_limit_w else None
        self.reserve = 0
        """Columns kept for throttle reasons: the panel sets the same on every row, so the
        rows' graphs stay aligned when one GPU reports a reason."""

    def push(self, sample: GpuSample) -> None:
        """Add a reading to the history."""
        self.util_hist.push(sample.gpu_util_pct)
        self.power_hist.append(sample.power_w)
        if self.power_chars is not None:
            self.power_chars.push(sample.power_w)
        self.sample = sample

    def _title(self) -> str:
        st = self.static
        return f"{st.index:>2} {('SIM ' if st.simulated else '') + _short_name(st.name):<14} "

    def _figures(self, s: GpuSample) -> tuple[str, str, str, str]:
        """(utilization, memory and power, temperature and clock, throttling) texts."""
        st = self.static
        total = s.mem_total_bytes or st.memory_total_bytes
        thr = throttle_text(s)
        return (f" {num(s.gpu_util_pct, '3.0f', '%'):>4} ",
                f"mem {gib(s.mem_used_bytes):>5}/{gib(total):<5}G "
                f"{num(s.power_w, '.0f'):>4}/{num(st.power_limit_w, '.0f', 'W'):<5}",
                f" {num(s.temperature_c, '.0f', '°C'):>5} {num(s.sm_clock_mhz, '.0f', 'MHz'):>7}",
                f"  {thr}" if thr else "")

    def graph_widths(self, width: int,
                     figures: tuple[str, str, str, str] | None = None) -> tuple[int, int]:
        """(utilization, power) graph columns in a line ``width`` wide (``figures``: the
        newest reading's texts, when the caller has them already)."""
        s = self.sample
        if figures is None:
            figures = self._figures(s) if s else ("", "", "", "")
        fixed = len(self._title()) + (sum(map(len, figures[:3])) if s else GPU_FIXED)
        return split_graphs(width or 80, fixed + max(self.reserve, len(figures[3])))

    def parts(self, width: int) -> Parts:
        """The line, ``width`` columns wide, as styled parts."""
        s, st = self.sample, self.static
        name = self._title()
        out: Parts = [(name[:3], "bold"), (name[3:], "magenta" if st.simulated else "")]
        if s is None:
            return [*out, ("waiting for the first reading", "dim")]
        figures = self._figures(s)
        util_w, power_w = self.graph_widths(width, figures)
        util, mem_power, temp_clock, thr = figures
        temp = s.temperature_c
        return [*out, (self.util_hist.draw(util_w), "green"), (util, ""), (mem_power, ""),
                (self.power_chars.draw(power_w) if self.power_chars is not None
                 else sparkline(self.power_hist, power_w, 0, None), "yellow"),
                (temp_clock, "red" if temp is not None and temp >= 85 else ""),
                (thr, "bold red")]


def core_bars(cores: tuple[float, ...], width: int) -> tuple[str, int]:
    """Every core as a bar in at most ``width`` columns: (bars, cores per bar).

    When there are more cores than columns, consecutive cores share a bar (their
    mean), so none is left out.
    """
    if not cores or width <= 0:
        return "", 1
    per = max(1, math.ceil(len(cores) / width))
    bars = [block(sum(g) / len(g), 100.0)
            for g in (cores[i:i + per] for i in range(0, len(cores), per))]
    return "".join(bars), per


class HostRow:
    """The host's line: a bar per CPU core (grouped when they do not fit), total CPU and
    its history, memory and load."""

    sample: HostSample | None = None
    """The newest reading (None: none yet, or the host could not be read)."""

    def __init__(self) -> None:
        self.cpu_hist = History(100.0)

    def push(self, sample: HostSample | None) -> None:
        """Add a reading (None: the host could not be read)."""
        if sample is not None:
            cores = sample.cpu_pct_per_core
            self.cpu_hist.push(sum(cores) / len(cores) if cores else None)
        self.sample = sample

    def layout_widths(self, width: int) -> tuple[int, int]:
        """(columns for the core bars, columns for the CPU history) in ``width`` columns."""
        h = self.sample
        n = len(h.cpu_pct_per_core) if h is not None else 0
        free = max(8, (width or 80) - HOST_FIXED)
        if n > free:  # grouped: all the room to the bars, and room for the ×k label
            return free - 4, 0
        left = free - n - 1
        return n, left if left >= MIN_HOST_GRAPH else 0

    def parts(self, width: int) -> Parts:
        """The line, ``width`` columns wide, as styled parts."""
        h = self.sample
        if h is None:
            return [("host ", "bold"), ("waiting for the first reading", "dim")]
        cores = h.cpu_pct_per_core
        mean = sum(cores) / len(cores) if cores else None
        bars_w, hist_w = self.layout_widths(width)
        bars, per = core_bars(cores, bars_w)
        out: Parts = [("host ", "bold"), (f"cpu {num(mean, '3.0f', '%'):>4} ", ""),
                      (bars, "cyan")]
        if per > 1:
            out.append((f" ×{per}", "dim"))  # cores per bar
        if hist_w:
            out += [(" ", ""), (self.cpu_hist.draw(hist_w), "blue")]
        out.append((f" mem {gib(h.mem_used_bytes)}/{gib(h.mem_total_bytes)}G"
                    f" load {num(h.load_1m, '.2f')}", ""))
        return out


def remote_text(gpus: tuple[RemoteGpu, ...], now_s: float) -> Text:
    """The running run's GPUs on other nodes, one line each (``node:gpuN``)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    labels = [one_line(g.label) for g in gpus]  # node names come from Slurm
    width = max(map(len, labels))
    for k, (g, label) in enumerate(zip(gpus, labels, strict=True)):
        if k:
            t.append("\n")
        t.append(f"{label:<{width}} ", "bold")
        if g.simulated:
            t.append("SIM ", "magenta")
        t.append(f"{num(g.util_pct, '3.0f', '%'):>4}  mem {gib(g.mem_used_bytes):>5}G "
                 f"{num(g.power_w, '.0f', 'W'):>5}")
        if g.t_wall_s is not None and now_s - g.t_wall_s > STALE_S:
            t.append(f"  (last sample {now_s - g.t_wall_s:.0f} s ago)", "yellow")
    return t


class DeviceLines(PartsLines):
    """The GPUs' lines, in index order, then the host's: one widget, a line each."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)
        self.gpus: dict[int, GpuRow] = {}
        self.host = HostRow()

    def redraw(self) -> int:
        """Show every row at the widget's width; repaints the lines that changed."""
        width = self.size.width
        return self.show_lines([*(self.gpus[i].parts(width) for i in sorted(self.gpus)),
                                self.host.parts(width)])

    def on_resize(self) -> None:
        self.redraw()  # the graphs take what the figures leave of the width

    def on_mount(self) -> None:
        self.redraw()


class Note(CachedLines, Static):
    """A line of text that changes rarely, beside lines that change at every frame."""


class DevicesPanel(Pane):
    """Every GPU and the host; fed one :class:`DeviceFrame` at a time."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.lines = DeviceLines(id="device-lines")
        self.frames_shown = 0

    def compose(self) -> ComposeResult:
        yield Note(id="gpu-note", classes="note")
        yield self.lines
        yield Static(id="remote-gpus", classes="note")

    def show(self, frame: DeviceFrame) -> None:
        """Render one frame (a line per GPU from the first frame that has it)."""
        rows = self.lines.gpus
        for st in frame.statics:
            if st.index not in rows:
                rows[st.index] = GpuRow(st)
        reserve = max((len(throttle_text(s)) + 2 for s in frame.gpus
                       if s.throttle_reasons), default=0)
        for s in frame.gpus:
            row = rows.get(s.index)
            if row is not None:
                row.reserve = reserve
                row.push(s)
        if frame.statics and frame.statics[0].simulated:
            self._note(Text("SIMULATED GPUs (--fake-gpus): no real device is read",
                            "bold magenta"))
        elif not frame.statics:
            self._note(Text(f"no GPU: {one_line(frame.gpu_unavailable or NA)}", "dim"))
        else:
            self._note(None)
        self.lines.host.push(frame.host)
        self.lines.redraw()
        self._show_remote(frame.remote)
        self.frames_shown += 1

    _remote_shown: tuple[RemoteGpu, ...] | None = None

    def _show_remote(self, gpus: tuple[RemoteGpu, ...]) -> None:
        """The running Slurm run's GPUs on other nodes, below the local devices."""
        if gpus == self._remote_shown and self.frames_shown:
            return  # unchanged: no re-layout (as the note)
        self._remote_shown = gpus
        box = self.query_one("#remote-gpus", Static)
        box.update(remote_text(gpus, time.time()) if gpus else "")
        box.display = bool(gpus)

    _note_shown: Text | None = None

    def _note(self, text: Text | None) -> None:
        # Updating a Static re-lays out the whole screen and paints twice: at 4 Hz that
        # was a third of the idle CPU, for a note that hardly ever changes.
        if text != self._note_shown or not self.frames_shown:  # the first frame sets it
            self._note_shown = text
            note = self.query_one("#gpu-note", Static)
            note.update(text or "")
            note.display = text is not None
