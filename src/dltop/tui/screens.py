"""The three screens: main (devices, queue, current run), results, history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Static

from dltop.catalog import (
    ACTIVE_CAMPAIGN_STATUSES,
    PENDING_JOB_STATUSES,
    CampaignStatus,
    Control,
    JobStatus,
    control_of,
)
from dltop.live.campaign import CampaignView
from dltop.live.devices import DeviceFrame
from dltop.results.queries import CampaignRow
from dltop.textsafe import one_line
from dltop.tui.devices import DevicesPanel
from dltop.tui.format import STATUS_STYLE
from dltop.tui.keybar import KeyBar
from dltop.tui.queue import QueueHeader, QueueTable
from dltop.tui.rundetail import RunDetailScreen
from dltop.tui.runpanel import RunPanel

if TYPE_CHECKING:  # typing only: the app imports this module
    from dltop.tui.app import DltopApp

TOO_SMALL = "Terminal too small: dltop needs at least 80x24 (now {w}x{h})."


class TitleBar(Static):
    """Campaign, its status and its engine, in one line."""

    def show(self, view: CampaignView | None, db_label: str) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" dltop ", "bold reverse")
        if view is None:
            t.append(f"  no campaign yet in {one_line(db_label)}  (a: add a profile)")
        else:
            c = view.campaign
            t.append(f"  campaign {c.id} `{one_line(c.name)}` ")
            t.append(c.status, STATUS_STYLE.get(c.status, "bold"))
            if control_of(view.control) is Control.PAUSE and c.status != CampaignStatus.PAUSED:
                t.append(" (pausing after this run)", "yellow")
            if c.status == CampaignStatus.WAITING and view.waiting_for:
                t.append(f" for devices: {one_line(view.waiting_for)}", "yellow")
            if view.engine_alive:
                t.append(f"  engine pid {view.engine_pid}")
            elif c.status in ACTIVE_CAMPAIGN_STATUSES:
                t.append("  engine NOT running", "bold red")
            total = sum(n for s, n in view.counts.items() if s != JobStatus.REMOVED)
            done = total - sum(n for s, n in view.counts.items() if s in PENDING_JOB_STATUSES)
            t.append(f"  jobs {done}/{total}")
        self.update(t)


class DltopScreen(Screen[None]):
    """Common parts: title bar, the too-small notice, the footer."""

    @property
    def dltop(self) -> DltopApp:
        return self.app  # type: ignore[return-value]

    def compose_body(self) -> ComposeResult:
        yield from ()

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Static(id="too-small")
        with Vertical(id="body"):
            yield from self.compose_body()
        # The running app's own keys (not an import of the app module: that was a cycle).
        yield KeyBar([*((b, False) for b in self.BINDINGS),
                      *((b, True) for b in self.dltop.BINDINGS)], id="keys")

    def on_screen_resume(self) -> None:
        self.show_campaign(self.dltop.campaign_view)

    def show_campaign(self, view: CampaignView | None) -> None:
        """New campaign state; subclasses show more of it."""
        self.query_one(TitleBar).show(view, self.dltop.db_label)

    def show_devices(self, frame: DeviceFrame) -> None:
        """New device readings (only the main screen shows them)."""

    def show_too_small(self, width: int, height: int) -> None:
        self.query_one("#too-small", Static).update(TOO_SMALL.format(w=width, h=height))


class MainScreen(DltopScreen):
    """Devices, the queue and the current run."""

    BINDINGS = [
        Binding("a", "app.add_profile", "Add"),
        Binding("c", "app.cancel_run", "Cancel run"),
        Binding("p", "app.toggle_pause", "Pause"),
        Binding("r", "app.retry_failed", "Retry"),
        Binding("K", "move(-1)", "Up", key_display="K"),
        Binding("J", "move(1)", "Down", key_display="J"),
        Binding("x,delete", "remove", "Remove"),
        Binding("enter", "open_run", "Details"),
    ]

    def compose_body(self) -> ComposeResult:
        yield DevicesPanel(id="devices")
        yield QueueHeader(id="queue-header")
        yield QueueTable(id="queue")
        yield RunPanel(id="run")

    def show_campaign(self, view: CampaignView | None) -> None:
        super().show_campaign(view)
        table = self.query_one(QueueTable)
        table.show(view)
        self.query_one(QueueHeader).number_width = table.number_width
        others = max(0, len(view.progress) - 1) if view else 0
        self.query_one(RunPanel).show(view.current if view else None, others)

    def show_devices(self, frame: DeviceFrame) -> None:
        self.query_one(DevicesPanel).show(frame)

    def on_queue_table_rows_wanted(self, msg: QueueTable.RowsWanted) -> None:
        self.dltop.want_queue_rows(msg.offset, msg.limit)

    def show_queue(self, view: CampaignView) -> None:
        """Another window of the queue was read (nothing else changed)."""
        table = self.query_one(QueueTable)
        table.show(view)
        self.query_one(QueueHeader).number_width = table.number_width

    def action_move(self, delta: int) -> None:
        table = self.query_one(QueueTable)
        job = table.selected_job
        if job is not None:
            table.preview_move(delta)  # the user sees it now; the database follows
            self.dltop.action_move_job(job, delta)

    def action_remove(self) -> None:
        job = self.query_one(QueueTable).selected_job
        if job is not None:
            self.dltop.action_remove_job(job)

    def action_open_run(self) -> None:
        """The selected job's run detail screen (its latest run)."""
        job = self.query_one(QueueTable).selected_job
        if job is not None:
            self.app.push_screen(RunDetailScreen(self.dltop.db_path, job,
                                                 poll_s=1.0 / self.dltop.db_hz))


class ResultsScreen(DltopScreen):
    """The campaign's pivot table (as ``dltop export``) and its scaling table."""

    BINDINGS = [Binding("m", "toggle_metric", "Time/throughput"),
                Binding("e", "app.export", "Export")]

    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("", id="results-table")

    def action_toggle_metric(self) -> None:
        app = self.dltop
        app.metric = "throughput" if app.metric == "time" else "time"
        app.refresh_results()

    _counts: dict[str, int] | None = None

    def show_campaign(self, view: CampaignView | None) -> None:
        super().show_campaign(view)
        counts = view.counts if view else None
        if counts != self._counts:  # a run finished: the table changes as it goes
            self._counts = counts
            self.dltop.refresh_results()

    _shown = ""

    def show_results(self, text: str) -> None:
        if text != self._shown:  # re-laying out an unchanged table is the costly part
            self._shown = text
            self.query_one("#results-table", Static).update(Text(text, no_wrap=True))

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        self.dltop.refresh_results()


class HistoryScreen(DltopScreen):
    """Past campaigns; enter opens one on the results screen."""

    BINDINGS = [Binding("enter", "open", "Open", priority=True),
                Binding("e", "export_selected", "Export")]

    def compose_body(self) -> ComposeResult:
        yield DataTable(id="history", cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one("#history", DataTable)
        for c in ("id", "name", "status", "created", "finished", "host"):
            table.add_column(c, key=c)

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        self.dltop.refresh_history()

    def show_history(self, rows: list[CampaignRow]) -> None:
        table = self.query_one("#history", DataTable)
        table.clear()
        for c in rows:
            # Text cells: a str cell is markup to a DataTable (a name like `sweep [/] v2`)
            table.add_row(str(c.id), Text(one_line(c.name)),
                          Text(c.status, STATUS_STYLE.get(c.status, "")),
                          Text(one_line(c.created_at or "")), Text(one_line(c.finished_at or "-")),
                          Text(one_line(c.host or "-")), key=str(c.id))

    def selected(self) -> int | None:
        table = self.query_one("#history", DataTable)
        if not table.row_count:
            return None
        return int(str(table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value))

    def action_open(self) -> None:
        cid = self.selected()
        if cid is not None:
            self.dltop.open_campaign(cid)

    def action_export_selected(self) -> None:
        cid = self.selected()
        if cid is not None:
            self.dltop.action_export(cid)
