"""The campaign's queue: a header line and a scrolling list of jobs with a cursor.

Drawn with Textual's line API: each row's strip is cached by its content, so a
refresh, a cursor move or a job move re-renders only what changed. (A DataTable
re-rendered every visible cell on any update: about 80 ms for a full 120x40
screen on our 2-core machine, which made J/K and screen switches slow.)
"""

from __future__ import annotations

from dataclasses import replace

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from dltop.catalog import JobStatus
from dltop.live.campaign import CampaignView, JobLine
from dltop.textsafe import one_line
from dltop.tui.format import STATUS_STYLE, per_iteration

COLUMNS = ("#", "status", "framework", "model", "batch", "device", "rep", "progress")
# Fixed widths: a cell may change in place to a longer value ("unsatisfiable").
WIDTHS = (4, 14, 11, 10, 6, 8, 4, 12)
Cells = tuple[str, ...]
CURSOR = Style(reverse=True)


def _cells(j: JobLine, progress: str) -> Cells:
    if not progress and j.median_s is not None:
        progress = per_iteration(j.median_s) + ("§" if j.contaminated else "")
    return (str(j.position + 1), j.status, j.framework, one_line(j.model), str(j.batch_size),
            j.device, str(j.repeat + 1), progress)


def _line(cells: Cells) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    for c, (value, width) in enumerate(zip(cells, WIDTHS, strict=True)):
        style = STATUS_STYLE.get(value, "") if c == 1 else ""
        t.append(f" {value[:width - 1]:<{width - 1}}", style)
    return t


class QueueHeader(Static):
    """Column names, aligned with :class:`QueueTable`'s rows."""

    def render(self) -> Text:
        t = _line(COLUMNS)
        t.stylize("bold")
        return t


class QueueTable(ScrollView, can_focus=True):
    """One row per job; the cursor picks the job that K/J/x act on."""

    BINDINGS = [Binding("up", "cursor(-1)", show=False),
                Binding("down", "cursor(1)", show=False),
                Binding("pageup", "cursor(-10)", show=False),
                Binding("pagedown", "cursor(10)", show=False),
                Binding("home", "cursor(-1000000)", show=False),
                Binding("end", "cursor(1000000)", show=False)]

    cursor_row: reactive[int] = reactive(0, always_update=True)

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._jobs: tuple[JobLine, ...] = ()
        self._cells: list[Cells] = []
        self._strips: dict[tuple[Cells, bool, int], Strip] = {}
        self._running_job: int | None = None

    # reading ----------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        """Number of jobs shown."""
        return len(self._cells)

    @property
    def selected_job(self) -> int | None:
        """The job id under the cursor (None for an empty queue)."""
        if not 0 <= self.cursor_row < len(self._jobs):
            return None
        return self._jobs[self.cursor_row].job_id

    # cursor -----------------------------------------------------------------------
    def move_cursor(self, row: int) -> None:
        """Put the cursor on ``row`` (clamped) and keep it in view."""
        row = max(0, min(row, len(self._cells) - 1)) if self._cells else 0
        if row != self.cursor_row:
            self.cursor_row = row
            self.refresh()
        top, height = int(self.scroll_offset.y), max(1, self.size.height)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def select(self, job_id: int) -> None:
        """Put the cursor on a job's row."""
        for slot, j in enumerate(self._jobs):
            if j.job_id == job_id:
                self.move_cursor(slot)
                return

    def on_click(self, event: Click) -> None:
        self.move_cursor(int(self.scroll_offset.y) + event.y)

    # data ---------------------------------------------------------------------------
    def show(self, view: CampaignView | None) -> None:
        """Display the view's jobs; the cursor stays on the job it was on."""
        jobs = view.jobs if view else ()
        cur = view.current if view else None
        # Every run in progress shows i/n (a packed campaign has several).
        progress = dict(view.progress) if view else {}
        if cur:  # read with the run's log tail, a moment later than the rest
            progress[cur.job_id] = (cur.done, cur.total)
        cells = [_cells(j, "{}/{}".format(*progress[j.job_id]) if j.job_id in progress
                        else "") for j in jobs]
        self._apply(jobs, cells)
        running = cur.job_id if cur else None
        if running is not None and running != self._running_job:
            # A new run started: bring it into view (the cursor stays where it is).
            slots = [j.job_id for j in jobs]
            if running in slots:
                self.scroll_to(y=max(0, slots.index(running) - 1), animate=False)
        self._running_job = running

    def preview_move(self, delta: int) -> bool:
        """Show a move at once, before the database confirms it (the next read does).

        Only when the job and its neighbour are both queued, which is exactly
        when :func:`dltop.store.edit.move_job` swaps them.
        """
        i = self.cursor_row
        j = i + (1 if delta > 0 else -1)
        if not (0 <= i < len(self._jobs) and 0 <= j < len(self._jobs)):
            return False
        a, b = self._jobs[i], self._jobs[j]
        if a.status != JobStatus.QUEUED or b.status != JobStatus.QUEUED:
            return False
        jobs = list(self._jobs)
        jobs[i], jobs[j] = replace(b, position=a.position), replace(a, position=b.position)
        cells = list(self._cells)
        cells[i] = _cells(jobs[i], self._cells[j][-1])
        cells[j] = _cells(jobs[j], self._cells[i][-1])
        self._apply(tuple(jobs), cells)
        return True

    def _apply(self, jobs: tuple[JobLine, ...], cells: list[Cells]) -> None:
        if cells == self._cells and jobs == self._jobs:
            return  # nothing changed: no redraw, no flicker
        keep = self.selected_job
        self._jobs, self._cells = jobs, cells
        self.virtual_size = Size(sum(WIDTHS), len(cells))
        if len(self._strips) > 4 * len(cells) + 64:
            self._strips.clear()  # forget rows that no longer exist
        if keep is not None:
            self.select(keep)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        row = int(self.scroll_offset.y) + y
        width = self.size.width
        if row >= len(self._cells):
            return Strip.blank(width, self.rich_style)
        key = (self._cells[row], row == self.cursor_row, width)
        strip = self._strips.get(key)
        if strip is None:
            text = _line(self._cells[row])
            text.truncate(width, pad=True)
            if key[1]:
                text.stylize(CURSOR)
            strip = Strip(list(text.render(self.app.console, end="")), width)
            self._strips[key] = strip
        return strip
