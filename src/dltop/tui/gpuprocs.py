"""The GPU process panel: every process on every GPU, like nvitop's list.

Fed by the device poller's slow reads (every 4th frame, about 1 Hz): pid,
owner, GPU memory, SM utilization and the command line. It takes the height
the screen leaves it (shared with the queue) and says how many rows it could
not show; with no process on any GPU it is hidden, and on a screen of 24 rows too
(the queue keeps its three rows).
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from dltop.live.devices import GpuProcessRow
from dltop.textsafe import one_line
from dltop.tui.format import num, size

HEADER = f"{'GPU':>3} {'PID':>8} {'USER':<10} {'GPU MEM':>9} {'SM':>4}  COMMAND"


def process_line(p: GpuProcessRow) -> Text:
    """One process as a row (user and command are data: escaped, never markup)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{p.gpu_index:>3} ", "bold")
    t.append(f"{p.pid:>8} ")
    t.append(f"{one_line(p.user)[:10]:<10} ")
    t.append(f"{size(p.gpu_mem_bytes):>9} ", "yellow")
    t.append(f"{num(p.sm_util_pct, '.0f', '%'):>4}  ", "green")
    t.append(one_line(p.command))
    return t


class GpuProcsPanel(Static):
    """Processes on the GPUs, largest GPU memory first within each GPU."""

    processes: reactive[tuple[GpuProcessRow, ...]] = reactive((), layout=False)
    """The rows of the last slow device read."""

    def watch_processes(self, rows: tuple[GpuProcessRow, ...]) -> None:
        # Its share of the height (CSS 1fr, beside the queue), but never more than its rows.
        if self.styles.max_height is None or self.styles.max_height.value != len(rows) + 1:
            self.styles.max_height = len(rows) + 1
        self.set_class(not rows, "-empty")  # a class, so the screen's CSS can hide it too

    def render(self) -> Text:
        rows = self.processes
        room = max(0, self.size.height - 1)  # the header takes one line
        shown = rows if len(rows) <= room else rows[:max(0, room - 1)]
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(HEADER, "bold reverse")
        for p in shown:
            out.append("\n")
            out.append_text(process_line(p))
        if len(shown) < len(rows):
            out.append(f"\n+{len(rows) - len(shown)} more processes (a taller terminal "
                       "shows them)", "dim")
        return out
