"""The campaign's queue: a header line and a scrolling list of jobs with a cursor.

Drawn with Textual's line API: each row's strip is cached by its content, so a
refresh, a cursor move or a job move re-renders only what changed. (A DataTable
re-rendered every visible cell on any update: about 80 ms for a full 120x40
screen on our 2-core machine, which made J/K and screen switches slow.)

Rows are virtual: the table's height is the whole queue (100 000 jobs is fine),
but it holds only a window of it, read by the app
(:func:`dltop.live.campaign.read_campaign`'s ``offset``/``limit``). When scrolling
or the cursor nears the window's edge, the table posts :class:`QueueTable.RowsWanted`
and the app reads that window off the event loop; a row not read yet is drawn as
``…`` until it arrives. Every read also brings the first and last rows of the queue
(``CampaignView.head``/``tail``), so Home and End need no read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from dltop.catalog import JobStatus
from dltop.live.campaign import QUEUE_WINDOW, CampaignView, JobLine
from dltop.textsafe import one_line
from dltop.tui.format import STATUS_STYLE, per_iteration, per_request, serves

COLUMNS = ("#", "status", "framework", "model", "batch", "device", "rep", "progress")
# Fixed widths: a cell may change in place to a longer value ("unsatisfiable").
WIDTHS = (4, 14, 11, 10, 6, 8, 4, 14)
SETTINGS = "settings"
"""The last column, headed only when the campaign varies more than model, framework,
batch and device (``bf16 cuda graphs``: the run label's words); it takes the rest of
the line."""
PROGRESS = 7
"""Index of the progress cell."""
MODEL = 3
"""Index of the model cell, whose column grows to the longest model name read."""
MODEL_MAX = 40
"""The widest the model column grows (a longer name is cut with the rest of the row)."""
Cells = tuple[str, ...]
CURSOR = Style(reverse=True)
NOT_READ: Cells = ("", "…", "", "", "", "", "", "", "")
"""A row whose job the table has not read yet."""


def _cells(j: JobLine, progress: str, row: int) -> Cells:
    # `#` is the row in the queue, not the stored position: positions only order the
    # queue, and keep the gaps that removed jobs (and retries, moved to the end) leave.
    if not progress and j.median_s is not None:
        seconds = per_request if serves(j.framework) else per_iteration
        progress = seconds(j.median_s) + ("§" if j.contaminated else "")
    return (str(row + 1), j.status, j.framework, one_line(j.model), str(j.batch_size),
            j.device, str(j.repeat + 1), progress, one_line(j.settings))


def _widths(number_width: int, model_width: int = WIDTHS[MODEL]) -> tuple[int, ...]:
    return (number_width, *WIDTHS[1:MODEL], model_width, *WIDTHS[MODEL + 1:])


def model_width(jobs: Iterable[JobLine], at_least: int = WIDTHS[MODEL]) -> int:
    """The model column's width: its longest model name and a space (``gpt2-medium``
    whole, not ``gpt2-smal``), never narrower than ``at_least``, at most :data:`MODEL_MAX`."""
    return min(MODEL_MAX, max([at_least, *(cell_len(one_line(j.model)) + 1 for j in jobs)]))


def fitted_model_width(model_width: int, number_width: int, width: int) -> int:
    """The model column drawn in ``width`` columns: narrower, down to its default, where
    the columns after it would not fit (80 columns and a 40-column name hid device, rep
    and progress; the name is cut with ``…`` instead)."""
    rest = number_width + sum(WIDTHS[1:MODEL]) + sum(WIDTHS[MODEL + 1:])
    return max(WIDTHS[MODEL], min(model_width, width - rest))


def _fit(value: str, width: int) -> str:
    """``value`` in exactly ``width`` terminal cells: padded, or cut with ``…``. Cells,
    not characters: a CJK character takes two, and counted as one it pushed the rest
    of its row two columns right (``résnet-模型`` rows misaligned)."""
    if cell_len(value) <= width:
        return set_cell_size(value, width)
    return set_cell_size(value, width - 1) + "…"


def _line(cells: Cells, widths: tuple[int, ...] = WIDTHS) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    for c, (value, width) in enumerate(zip(cells, widths, strict=False)):
        style = STATUS_STYLE.get(value, "") if c == 1 else ""
        t.append(f" {_fit(value, width - 1)}", style)
    if len(cells) > len(widths) and cells[len(widths)]:
        t.append(f" {cells[len(widths)]}")  # settings: the rest of the line
    return t


class QueueHeader(Static):
    """Column names, aligned with :class:`QueueTable`'s rows."""

    number_width: reactive[int] = reactive(WIDTHS[0])
    """Width of the ``#`` column: the table's :attr:`QueueTable.number_width`."""
    model_width: reactive[int] = reactive(WIDTHS[MODEL])
    """Width of the model column: the table's :attr:`QueueTable.model_width`."""
    settings: reactive[bool] = reactive(False)
    """Head the settings column (the table's :attr:`QueueTable.has_settings`)."""
    fit_width: reactive[int] = reactive(10**6)
    """The table's width, which its model column fits in (:func:`fitted_model_width`)."""

    def render(self) -> Text:
        models = fitted_model_width(self.model_width, self.number_width, self.fit_width)
        t = _line((*COLUMNS, SETTINGS if self.settings else ""),
                  _widths(self.number_width, models))
        t.stylize("bold")
        return t


class QueueTable(ScrollView, can_focus=True):
    """One row per job; the cursor picks the job that K/J/x act on."""

    BINDINGS = [Binding("up", "cursor(-1)", show=False),
                Binding("down", "cursor(1)", show=False),
                Binding("pageup", "cursor(-10)", show=False),
                Binding("pagedown", "cursor(10)", show=False),
                Binding("home", "cursor(-1000000000)", show=False),
                Binding("end", "cursor(1000000000)", show=False)]

    cursor_row: reactive[int] = reactive(0, always_update=True, repaint=False)
    """Row of the cursor in the whole queue (a move repaints its two rows, not the table)."""

    class RowsWanted(Message):
        """The table is about to show rows outside its window: read ``limit`` rows
        from row ``offset``."""

        def __init__(self, offset: int, limit: int) -> None:
            super().__init__()
            self.offset = offset
            self.limit = limit

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._jobs: tuple[JobLine, ...] = ()
        self._cells: list[Cells] = []
        self._offset = 0  # row of _jobs[0]
        self._edges: dict[int, tuple[JobLine, Cells]] = {}  # head and tail rows beyond it
        self._total = 0
        self._asked: tuple[int, int] | None = None
        self._strips: dict[tuple[Cells, bool, int], Strip] = {}
        self._running_job: int | None = None
        self.number_width = WIDTHS[0]
        """Width of the ``#`` column: wider than the default for queues past 999 jobs."""
        self.model_width = WIDTHS[MODEL]
        """Width of the model column: the longest model name read so far (it only grows,
        so rows do not shift as the queue scrolls)."""

    # reading ----------------------------------------------------------------------
    @property
    def has_settings(self) -> bool:
        """Whether a job read has settings to show (the campaign varies in them)."""
        return any(j.settings for j in self._jobs)

    @property
    def row_count(self) -> int:
        """Number of jobs in the queue (rows, read or not)."""
        return self._total

    @property
    def selected_job(self) -> int | None:
        """The job id under the cursor (None for an empty queue, or a row not read yet)."""
        line = self.selected_line
        return None if line is None else line.job_id

    @property
    def selected_line(self) -> JobLine | None:
        """The job under the cursor, as shown (None for an empty queue, or a row not read)."""
        i = self.cursor_row - self._offset
        if 0 <= i < len(self._jobs):
            return self._jobs[i]
        edge = self._edges.get(self.cursor_row)
        return edge[0] if edge else None

    def cells_at(self, row: int) -> Cells | None:
        """The cells shown on ``row`` of the queue (None when not read yet)."""
        i = row - self._offset
        if 0 <= i < len(self._cells):
            return self._cells[i]
        edge = self._edges.get(row)
        return edge[1] if edge else None

    # cursor -----------------------------------------------------------------------
    def move_cursor(self, row: int) -> None:
        """Put the cursor on ``row`` (clamped) and keep it in view."""
        row = max(0, min(row, self._total - 1)) if self._total else 0
        if row != self.cursor_row:
            old, self.cursor_row = self.cursor_row, row
            self.refresh_lines(old)  # only the rows that changed: the others' strips stand
            self.refresh_lines(row)
        top, height = int(self.scroll_offset.y), max(1, self.size.height)
        if row < top:
            top = row
        elif row >= top + height:
            top = row - height + 1
        else:
            return
        self._want_rows(top)
        self.scroll_to(y=top, animate=False)

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def select(self, job_id: int) -> None:
        """Put the cursor on a job's row (a job among the rows read)."""
        row = self._row_of(job_id)
        if row is not None:
            self.move_cursor(row)

    def _row_of(self, job_id: int) -> int | None:
        for slot, j in enumerate(self._jobs):
            if j.job_id == job_id:
                return self._offset + slot
        return next((row for row, (j, _) in self._edges.items() if j.job_id == job_id), None)

    def on_click(self, event: Click) -> None:
        self.move_cursor(int(self.scroll_offset.y) + event.y)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._want_rows(int(new_value))

    def _want_rows(self, top: int) -> None:
        """Ask for a new window unless the rows around ``top`` are read already."""
        height = max(1, self.size.height)
        low, high = max(0, top - height), min(self._total, top + 2 * height)
        end = self._offset + len(self._jobs)
        if all(self._offset <= r < end or r in self._edges for r in range(low, high)):
            return
        limit = max(QUEUE_WINDOW, 6 * height)
        want = (max(0, min(top - (limit - height) // 2, self._total - limit)), limit)
        if want != self._asked:
            self._asked = want
            self.post_message(self.RowsWanted(*want))

    # data ---------------------------------------------------------------------------
    def show(self, view: CampaignView | None) -> None:
        """Display the view's window of jobs; the cursor stays on the job it was on."""
        jobs = view.jobs if view else ()
        cur = view.current if view else None
        # Every run in progress shows i/n (a packed campaign has several).
        progress = dict(view.progress) if view else {}
        if cur:  # read with the run's log tail, a moment later than the rest
            progress[cur.job_id] = (cur.done, cur.total)

        def cells_of(j: JobLine, row: int) -> Cells:
            return _cells(j, "{}/{}".format(*progress[j.job_id]) if j.job_id in progress
                          else "", row)

        offset, total = (view.jobs_offset, view.job_total) if view else (0, 0)
        cells = [cells_of(j, offset + k) for k, j in enumerate(jobs)]
        edges = {}
        if view:
            for first, rows in ((0, view.head), (total - len(view.tail), view.tail)):
                for k, j in enumerate(rows):
                    if not offset <= first + k < offset + len(jobs):
                        edges[first + k] = (j, cells_of(j, first + k))
        self._apply(jobs, cells, offset, total, edges)
        running = cur.job_id if cur else None
        if running is not None and running != self._running_job and view is not None \
                and view.running_row is not None:
            # A new run started: bring it into view (the cursor stays where it is).
            top = max(0, view.running_row - 1)
            self._want_rows(top)
            self.scroll_to(y=top, animate=False)
        self._running_job = running

    def preview_move(self, delta: int) -> bool:
        """Show a move at once, before the database confirms it (the next read does).

        Only when the job and its neighbour are both queued, which is exactly
        when :func:`dltop.store.edit.move_job` swaps them.
        """
        i = self.cursor_row - self._offset
        j = i + (1 if delta > 0 else -1)
        if not (0 <= i < len(self._jobs) and 0 <= j < len(self._jobs)):
            return False
        a, b = self._jobs[i], self._jobs[j]
        if a.status != JobStatus.QUEUED or b.status != JobStatus.QUEUED:
            return False
        jobs = list(self._jobs)
        jobs[i], jobs[j] = replace(b, position=a.position), replace(a, position=b.position)
        cells = list(self._cells)
        cells[i] = _cells(jobs[i], self._cells[j][PROGRESS], self._offset + i)
        cells[j] = _cells(jobs[j], self._cells[i][PROGRESS], self._offset + j)
        self._apply(tuple(jobs), cells, self._offset, self._total, self._edges)
        return True

    def _apply(self, jobs: tuple[JobLine, ...], cells: list[Cells], offset: int,
               total: int, edges: dict[int, tuple[JobLine, Cells]]) -> None:
        if (cells == self._cells and jobs == self._jobs and offset == self._offset
                and total == self._total and edges == self._edges):
            return  # nothing changed: no redraw, no flicker
        keep = self.selected_job
        self._jobs, self._cells, self._offset, self._total = jobs, cells, offset, total
        self._edges = edges
        self._asked = None  # a window arrived: the next gap asks again
        number_width = max(WIDTHS[0], len(str(total)) + 1)
        models = model_width((*jobs, *(j for j, _ in edges.values())), self.model_width)
        if len(self._strips) > 4 * len(cells) + 64 or number_width != self.number_width \
                or models != self.model_width:
            self._strips.clear()  # forget rows that no longer exist, or are laid out anew
        self.number_width, self.model_width = number_width, models
        self.virtual_size = Size(sum(_widths(number_width, models)), total)
        row = None if keep is None else self._row_of(keep)
        if row is not None and row != self.cursor_row:
            self.move_cursor(row)  # its job moved: the cursor follows it, into view
        if self.cursor_row >= total:
            self.move_cursor(total - 1)
        self._want_rows(int(self.scroll_offset.y))
        self.refresh()

    def on_resize(self) -> None:
        for header in self.screen.query(QueueHeader):  # its columns stay over the rows'
            header.fit_width = self.size.width

    def render_line(self, y: int) -> Strip:
        row = int(self.scroll_offset.y) + y
        width = self.size.width
        if row >= self._total:
            return Strip.blank(width, self.rich_style)
        cells = self.cells_at(row) or NOT_READ
        key = (cells, row == self.cursor_row, width)
        strip = self._strips.get(key)
        if strip is None:
            models = fitted_model_width(self.model_width, self.number_width, width)
            text = _line(cells, _widths(self.number_width, models))
            text.truncate(width, pad=True)
            if key[1]:
                text.stylize(CURSOR)
            strip = Strip(list(text.render(self.app.console, end="")), width)
            self._strips[key] = strip
        return strip
