"""A pager over a run's whole ``runner.log``, however large.

The log is never loaded whole. A worker thread scans it in 4 MiB chunks from a byte
offset (:func:`dltop.live.logfile.scan_log`) and hands each chunk's line starts to the
event loop, where :class:`LogLines` (Textual's line API) grows its height; a line is
read by its offset only when it is drawn (one ``pread`` for a screenful), and the
lines last drawn are cached. A 100 MB log pages from its first chunk on, while the
rest is indexed; ``G`` then reaches its last line. A growing log (a running run) is
scanned again every second from where the index ends, and a view at the end follows it.
"""

from __future__ import annotations

import os
import time

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from dltop.live.logfile import LogChunk, LogIndex, open_log, scan_log
from dltop.textsafe import one_line
from dltop.tui.workerfail import ShowsWorkerErrors

FOLLOW_S = 1.0
"""How often a log is scanned again for lines written since."""
CACHE_LINES = 4096


class LogLines(ScrollView, can_focus=True):
    """The log's lines, read by offset as they are drawn."""

    DEFAULT_CSS = "LogLines { height: 1fr; }"
    BINDINGS = [Binding("j", "scroll_down", show=False), Binding("k", "scroll_up", show=False)]

    def __init__(self, path: str, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.index = LogIndex(path)
        self._fd: int | None = None
        self._cache: dict[int, str] = {}

    def add(self, chunk: LogChunk) -> None:
        """More of the index (called on the event loop)."""
        at_end = self.scroll_offset.y >= self.max_scroll_y
        before = self.index.line_count
        last = before - 1
        self.index.add(chunk)
        self._cache.pop(last, None)  # the unfinished last line may have grown
        self.virtual_size = Size(min(self.index.longest, 10_000) + 1, self.index.line_count)
        if at_end and before and self.index.line_count > before:
            self.scroll_end(animate=False, immediate=True)
        self.refresh()

    def _lines(self, first: int, count: int) -> None:
        if self._fd is None:
            self._fd = open_log(self.index.path)
        for k, line in enumerate(self.index.read_lines(self._fd, first, count)):
            self._cache[first + k] = one_line(line)

    def line_text(self, row: int) -> str:
        """The text of line ``row`` (control characters escaped)."""
        if row not in self._cache:
            if len(self._cache) > CACHE_LINES:
                self._cache.clear()
            try:
                self._lines(row, max(1, self.size.height))
            except OSError as exc:
                return f"(cannot read: {exc.strerror})"
        return self._cache.get(row, "")

    def render_line(self, y: int) -> Strip:
        row = int(self.scroll_offset.y) + y
        width = self.size.width
        if row >= self.index.line_count:
            return Strip.blank(width, self.rich_style)
        x = int(self.scroll_offset.x)
        text = self.line_text(row)[x:x + width]
        return Strip([Segment(text, Style())]).adjust_cell_length(width, self.rich_style)

    def on_unmount(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LogViewer(ShowsWorkerErrors, Screen[None]):
    """The whole log of one run; escape returns (a read that fails says so in the head)."""

    DEFAULT_CSS = """
    LogViewer #log-head, LogViewer #log-keys { height: 1; background: $panel; }
    """
    BINDINGS = [Binding("escape,q", "close", "Close"),
                Binding("G", "end", "End", key_display="G"),
                Binding("g", "home", "Start", key_display="g")]

    def __init__(self, path: str, title: str, follow: bool = False) -> None:
        super().__init__()
        self.path, self.title_text, self.follow = path, title, follow
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="log-head")
        yield LogLines(self.path, id="log-lines")
        yield Static(" escape close  G end  g start  ↑↓ PgUp PgDn scroll  ←→ sideways",
                     id="log-keys")

    @property
    def lines(self) -> LogLines:
        return self.query_one(LogLines)

    def on_mount(self) -> None:
        self._head()
        self.lines.focus()
        self._scan()

    def _head(self) -> None:
        ix = self.lines.index
        state = self.error or ("" if ix.complete else
                               f"  reading… {ix.end >> 20}/{ix.size >> 20} MiB")
        # Text, not a markup string: a path or an error may hold `[` (and control ones)
        self.query_one("#log-head", Static).update(Text(
            f" {one_line(self.title_text)}: {one_line(self.path)}  "
            f"{ix.line_count} lines{one_line(state)}"))

    @work(thread=True, group="log-scan", exclusive=True, exit_on_error=False,
          description="reading the log")
    def _scan(self) -> None:
        from textual.worker import get_current_worker

        worker = get_current_worker()
        end, line_start, first = 0, 0, True
        while not worker.is_cancelled:
            try:
                chunk = scan_log(self.path, end, line_start=line_start)
            except OSError as exc:
                self.app.call_from_thread(self._failed, exc.strerror or str(exc))
                return
            if chunk.end > end or first:
                end, first = chunk.end, False
                line_start = chunk.starts[-1] if chunk.starts else line_start
                self.app.call_from_thread(self._add, chunk)
            if chunk.end >= chunk.size:
                if not self.follow:
                    return
                time.sleep(FOLLOW_S)

    def _add(self, chunk: LogChunk) -> None:
        self.lines.add(chunk)
        self._head()

    def _failed(self, reason: str) -> None:
        self.error = f"  (cannot read: {reason})"
        self._head()

    def show_worker_error(self, text: str) -> None:
        self.error = f"  ({text})"
        self._head()

    def action_close(self) -> None:
        self.workers.cancel_group(self, "log-scan")
        self.dismiss(None)

    def action_end(self) -> None:
        self.lines.scroll_end(animate=False, immediate=True)

    def action_home(self) -> None:
        self.lines.scroll_home(animate=False, immediate=True)
