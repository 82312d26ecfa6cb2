"""The campaign's queue as a table; the cursor picks the job to move or remove."""

from __future__ import annotations

import contextlib

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist

from dltop.live.campaign import CampaignView, JobLine
from dltop.tui.format import STATUS_STYLE

COLUMNS = ("#", "status", "framework", "model", "batch", "device", "rep", "progress")


class QueueTable(DataTable[Text]):
    """One row per job; rows are keyed by job id so the cursor survives refreshes."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        for c in COLUMNS:
            self.add_column(c, key=c)
        self._shown: tuple[JobLine, ...] = ()
        self._progress = ""

    @property
    def selected_job(self) -> int | None:
        """The job id under the cursor (None for an empty table)."""
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key
        return int(str(key.value))

    def show(self, view: CampaignView | None) -> None:
        """Display the view's jobs, keeping the cursor on the same job."""
        jobs = view.jobs if view else ()
        progress = ""
        running = None
        if view and view.current:
            progress = f"{view.current.done}/{view.current.total}"
            running = view.current.job_id
        if jobs == self._shown and progress == self._progress:
            return  # nothing changed: no redraw, no flicker
        keep = self.selected_job
        self.clear()
        for j in jobs:
            self.add_row(
                Text(str(j.position + 1)), Text(j.status, STATUS_STYLE.get(j.status, "")),
                Text(j.framework), Text(j.model), Text(str(j.batch_size)), Text(j.device),
                Text(str(j.repeat + 1)), Text(progress if j.job_id == running else ""),
                key=str(j.job_id))
        self._shown, self._progress = jobs, progress
        if keep is not None:
            with contextlib.suppress(RowDoesNotExist):  # the job left the table
                self.move_cursor(row=self.get_row_index(str(keep)), animate=False)
