"""Device widgets: one row per GPU and one for the host, each with its history."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from dltop.live.devices import DeviceFrame
from dltop.telemetry.model import GpuSample, GpuStatic, HostSample
from dltop.textsafe import one_line
from dltop.tui.format import NA, gib, num, sparkline

HISTORY = 120
"""Readings kept per device for the sparklines (30 s at 4 Hz)."""


def _short_name(name: str) -> str:
    return one_line(name.replace("NVIDIA ", "").replace("GeForce ", ""))[:14]


class GpuRow(Static):
    """One GPU: utilization and power sparklines, memory, power, temperature, clock."""

    sample: reactive[GpuSample | None] = reactive(None, layout=False)

    def __init__(self, static: GpuStatic, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.static = static
        self.util_hist: deque[float | None] = deque(maxlen=HISTORY)
        self.power_hist: deque[float | None] = deque(maxlen=HISTORY)

    def push(self, sample: GpuSample) -> None:
        """Add a reading to the history and show it."""
        self.util_hist.append(sample.gpu_util_pct)
        self.power_hist.append(sample.power_w)
        self.sample = sample

    def render(self) -> Text:
        s, st = self.sample, self.static
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{st.index:>2} ", "bold")
        t.append(f"{('SIM ' if st.simulated else '') + _short_name(st.name):<14} ",
                 "magenta" if st.simulated else "")
        if s is None:
            t.append("waiting for the first reading", "dim")
            return t
        t.append(sparkline(self.util_hist, 10, 0, 100), "green")
        t.append(f" {num(s.gpu_util_pct, '3.0f', '%'):>4} ")
        total = s.mem_total_bytes or st.memory_total_bytes
        t.append(f"mem {gib(s.mem_used_bytes):>5}/{gib(total):<5}G ")
        limit = st.power_limit_w
        t.append(f"{num(s.power_w, '.0f'):>4}/{num(limit, '.0f', 'W'):<5}")
        t.append(sparkline(self.power_hist, 6, 0, limit), "yellow")
        temp = s.temperature_c
        t.append(f" {num(temp, '.0f', '°C'):>5}",
                 "red" if temp is not None and temp >= 85 else "")
        t.append(f" {num(s.sm_clock_mhz, '.0f', 'MHz'):>7}")
        return t


class HostRow(Static):
    """The host: one bar per CPU core, total CPU, memory and load."""

    sample: reactive[HostSample | None] = reactive(None)

    def render(self) -> Text:
        h = self.sample
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("host ", "bold")
        if h is None:
            t.append("waiting for the first reading", "dim")
            return t
        cores = h.cpu_pct_per_core
        mean = sum(cores) / len(cores) if cores else None
        t.append(f"cpu {num(mean, '3.0f', '%'):>4} ")
        t.append(sparkline(list(cores), min(len(cores), 32), 0, 100), "cyan")
        t.append(f" mem {gib(h.mem_used_bytes)}/{gib(h.mem_total_bytes)}G")
        t.append(f" load {num(h.load_1m, '.2f')}")
        return t


class DevicesPanel(Vertical):
    """Every GPU and the host; fed one :class:`DeviceFrame` at a time."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._rows: dict[int, GpuRow] = {}
        self.frames_shown = 0

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-note", classes="note")
        yield HostRow(id="host-row")

    def show(self, frame: DeviceFrame) -> None:
        """Render one frame (mounting a row per GPU the first time)."""
        new = [st for st in frame.statics if st.index not in self._rows]
        if new:
            rows = [GpuRow(st, id=f"gpu-{st.index}", classes="gpu-row") for st in new]
            for r in rows:
                self._rows[r.static.index] = r
            self.mount_all(rows, before=self.query_one("#host-row"))
        for s in frame.gpus:
            row = self._rows.get(s.index)
            if row is not None:
                row.push(s)
        if frame.statics and frame.statics[0].simulated:
            self._note(Text("SIMULATED GPUs (--fake-gpus): no real device is read",
                            "bold magenta"))
        elif not frame.statics:
            self._note(Text(f"no GPU: {one_line(frame.gpu_unavailable or NA)}", "dim"))
        else:
            self._note(None)
        self.query_one(HostRow).sample = frame.host
        self.frames_shown += 1

    _note_shown: Text | None = None

    def _note(self, text: Text | None) -> None:
        # Updating a Static re-lays out the whole screen and paints twice: at 4 Hz that
        # was a third of the idle CPU, for a note that hardly ever changes.
        if text != self._note_shown or not self.frames_shown:  # the first frame sets it
            self._note_shown = text
            note = self.query_one("#gpu-note", Static)
            note.update(text or "")
            note.display = text is not None
