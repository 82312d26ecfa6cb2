"""The campaign's queue as a table; the cursor picks the job to move or remove."""

from __future__ import annotations

from dataclasses import replace

from rich.text import Text
from textual.widgets import DataTable

from dltop.live.campaign import CampaignView, JobLine
from dltop.tui.format import STATUS_STYLE, per_iteration

COLUMNS = ("#", "status", "framework", "model", "batch", "device", "rep", "progress")
# Fixed widths: cells change in place, and a column must not clip a later,
# longer value ("running", "unsatisfiable").
WIDTHS = (3, 13, 10, 9, 5, 7, 3, 11)
Cells = tuple[str, ...]


def _cells(j: JobLine, progress: str) -> Cells:
    if not progress and j.median_s is not None:
        progress = per_iteration(j.median_s)
    return (str(j.position + 1), j.status, j.framework, j.model, str(j.batch_size), j.device,
            str(j.repeat + 1), progress)


def _text(column: int, value: str) -> Text:
    return Text(value, STATUS_STYLE.get(value, "")) if column == 1 else Text(value)


class QueueTable(DataTable[Text]):
    """One row per job. Rows are slots (row i shows the i-th job), so a refresh
    only rewrites the cells that changed: a status, the progress, or the two
    rows a move swapped. A thousand-job queue costs no more than a short one.
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        for c, w in zip(COLUMNS, WIDTHS, strict=True):
            self.add_column(c, key=c, width=w)
        self._jobs: tuple[JobLine, ...] = ()
        self._cells: list[Cells] = []
        self._running_job: int | None = None

    @property
    def selected_job(self) -> int | None:
        """The job id under the cursor (None for an empty table)."""
        if not self._jobs or not 0 <= self.cursor_row < len(self._jobs):
            return None
        return self._jobs[self.cursor_row].job_id

    def select(self, job_id: int) -> None:
        """Put the cursor on a job's row."""
        slots = [j.job_id for j in self._jobs]
        if job_id in slots:
            self.move_cursor(row=slots.index(job_id), animate=False)

    def show(self, view: CampaignView | None) -> None:
        """Display the view's jobs; the cursor stays on the job it was on."""
        jobs = view.jobs if view else ()
        cur = view.current if view else None
        progress = f"{cur.done}/{cur.total}" if cur else ""
        cells = [_cells(j, progress if cur and j.job_id == cur.job_id else "") for j in jobs]
        self._apply(jobs, cells)
        running = cur.job_id if cur else None
        if running is not None and running != self._running_job:
            # A new run started: bring it into view (the cursor stays where it is).
            slot = [j.job_id for j in jobs].index(running) if running in \
                [j.job_id for j in jobs] else None
            if slot is not None:
                self.scroll_to(y=max(0, slot - 1), animate=False)
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
        if a.status != "queued" or b.status != "queued":
            return False
        jobs = list(self._jobs)
        jobs[i], jobs[j] = replace(b, position=a.position), replace(a, position=b.position)
        cells = list(self._cells)
        cells[i] = _cells(jobs[i], self._cells[j][-1])
        cells[j] = _cells(jobs[j], self._cells[i][-1])
        self._apply(tuple(jobs), cells)
        return True

    def _apply(self, jobs: tuple[JobLine, ...], cells: list[Cells]) -> None:
        if cells == self._cells:
            return  # nothing changed: no redraw, no flicker
        keep = self.selected_job
        for slot in range(len(self._cells) - 1, len(cells) - 1, -1):
            self.remove_row(str(slot))
        for slot, row in enumerate(cells):
            if slot >= len(self._cells):
                self.add_row(*(_text(c, v) for c, v in enumerate(row)), key=str(slot))
                continue
            old = self._cells[slot]
            for c, (x, y) in enumerate(zip(old, row, strict=True)):
                if x != y:
                    self.update_cell(str(slot), COLUMNS[c], _text(c, y))
        self._jobs, self._cells = jobs, cells
        if keep is not None:
            self.select(keep)
