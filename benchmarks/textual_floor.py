"""The least a Textual app can cost for dltop's device frames: one widget of N lines of
precomputed strips (the shape of dltop's 8 GPU rows and host row), repainted at a rate.

Run by ``benchmarks/tui_latency.py`` in the idle rounds, beside ``dltop tui``, glances and
htop, to say how much of the viewer's idle CPU is Textual's own price for a repaint (the
compositor, the terminal write) rather than dltop's work. It uses dltop's terminal driver
(``tui/driver.py``), so Textual's 10 Hz input polling is not counted either.

    python benchmarks/textual_floor.py HZ [LINES]
"""

from __future__ import annotations

import random
import sys

from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.driver import Driver
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from dltop.tui.driver import quiet_driver

BLOCKS = " ▁▂▃▄▅▆▇█"
STYLES = [Style(color=c) for c in ("green", "yellow", "red", "magenta")] + [Style()]


class Lines(Widget):
    """N lines like a GPU row: graphs that scroll by one reading, figures that change."""

    DEFAULT_CSS = "Lines { height: auto; }"

    def __init__(self, hz: float, n: int) -> None:
        super().__init__()
        self.hz, self.n = hz, n
        self.hist = ["".join(random.choice(BLOCKS) for _ in range(60)) for _ in range(n)]
        self.strips = [Strip([]) for _ in range(n)]

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return self.n

    def on_mount(self) -> None:
        self.set_interval(1 / self.hz, self.tick)

    def tick(self) -> None:
        width = self.size.width
        for i in range(self.n):
            h = self.hist[i] = self.hist[i][1:] + random.choice(BLOCKS)
            self.strips[i] = Strip([
                Segment(f"{i:>2} SIM Simulated GPU ", STYLES[3]), Segment(h, STYLES[0]),
                Segment(f" {random.randint(0, 100):>3}% mem 12.3/80.0G 250/700W ", STYLES[4]),
                Segment(h[:30], STYLES[1]), Segment(" 45°C 1980MHz", STYLES[2]),
            ]).adjust_cell_length(width)
        self.refresh(Region(0, 0, width, self.n))

    def render_line(self, y: int) -> Strip:
        return self.strips[y] if y < self.n else Strip.blank(self.size.width)


class Floor(App[None]):
    def __init__(self, hz: float, n: int) -> None:
        super().__init__()
        self.hz, self.n = hz, n

    def get_driver_class(self) -> type[Driver]:
        return quiet_driver(super().get_driver_class())

    def compose(self) -> ComposeResult:
        yield Lines(self.hz, self.n)


if __name__ == "__main__":
    Floor(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 9).run()
