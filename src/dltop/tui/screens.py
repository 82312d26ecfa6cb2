"""The screens: main (devices, queue, current run) and history; results in
:mod:`dltop.tui.results_screen`."""

from __future__ import annotations

import time
from typing import cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
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
from dltop.procs import HEARTBEAT_S, HEARTBEAT_STALE_S, heartbeat_age, this_host
from dltop.results.queries import CampaignRow
from dltop.textsafe import one_line
from dltop.tui.actions import steering
from dltop.tui.devices import DevicesPanel
from dltop.tui.format import STATUS_STYLE
from dltop.tui.gpuprocs import GpuProcsPanel
from dltop.tui.keybar import KeyBar
from dltop.tui.queue import QueueHeader, QueueTable
from dltop.tui.quietdraw import CachedLines, Pane
from dltop.tui.rundetail import TOO_SMALL, RunDetailScreen
from dltop.tui.runpanel import RunPanel
from dltop.tui.viewer import Viewer


def pausing_text(view: CampaignView) -> str | None:
    """``pausing after run N`` while a pause waits for the run going on (None otherwise)."""
    if control_of(view.control) is not Control.PAUSE or \
            view.campaign.status == CampaignStatus.PAUSED:
        return None
    if view.current is None:
        return "pausing"
    more = len(view.progress) - 1
    return f"pausing after run {view.current.run_id}" + (f" (+{more})" if more > 0 else "")


def owner_text(view: CampaignView) -> str:
    """`` on login1, beat 5 s ago``: another host's engine, known by its heartbeat alone,
    its age in whole beats (5 s) so that the title changes, and is laid out again, once a
    beat. An engine on this host is known by its pid: its beat is shown only when late
    (half the stale limit: frozen, or its writes held up), "" otherwise."""
    beat_s = view.engine_heartbeat_s
    age = None if beat_s is None else max(0.0, time.time() - beat_s)
    beat = "" if beat_s is None or age is None else \
        f", beat {heartbeat_age(beat_s + age % HEARTBEAT_S)}"
    if view.engine_host is not None and view.engine_host != this_host():
        return f" on {one_line(view.engine_host)}{beat}"
    return beat if age is not None and age >= HEARTBEAT_STALE_S / 2 else ""


class TitleBar(CachedLines, Static):
    """Campaign, its status and its engine, in one line."""

    def show(self, view: CampaignView | None, db_label: str,
             newer: CampaignRow | None = None, read_only: bool = False) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" dltop ", "bold reverse")
        if read_only:
            t.append(" read-only ", "bold black on cyan")
        if newer is not None:
            # An older campaign is shown (from History, or --campaign): say what runs now.
            t.append(f" campaign {newer.id} {newer.status}: f follows ", "bold black on yellow")
        if view is None:
            t.append(f"  no campaign yet in {one_line(db_label)}"
                     + ("" if read_only else "  (a: add a profile)"))
        else:
            c = view.campaign
            t.append(f"  campaign {c.id} `{one_line(c.name)}` ")
            t.append(c.status, STATUS_STYLE.get(c.status, "bold"))
            if (pausing := pausing_text(view)) is not None:
                t.append(f" ({pausing})", "yellow")
            if c.status == CampaignStatus.WAITING and view.waiting_for:
                t.append(f" for devices: {one_line(view.waiting_for)}", "yellow")
            if view.engine_alive:
                t.append(f"  engine pid {view.engine_pid}{owner_text(view)}")
            elif c.status in ACTIVE_CAMPAIGN_STATUSES:
                t.append("  engine NOT running", "bold red")
            total = sum(n for s, n in view.counts.items() if s != JobStatus.REMOVED)
            done = total - sum(n for s, n in view.counts.items() if s in PENDING_JOB_STATUSES)
            t.append(f"  jobs {done}/{total}")
        # Updating a Static lays the whole screen out again: a read that changed nothing
        # here (the forced one every 5 s, every read during a run) must not.
        if t != self._shown:
            self._shown = t
            self.update(t)

    _shown: Text | None = None


class DltopScreen(CachedLines, Screen[None]):
    """Common parts: title bar, the too-small notice, the footer; j/k as in htop."""

    BINDINGS = [Binding("j", "vim_cursor(1)", "Down", show=False),
                Binding("k", "vim_cursor(-1)", "Up", show=False)]

    def action_vim_cursor(self, delta: int) -> None:
        """``j``/``k``: what down/up do in the focused list (queue, history, results)."""
        w = self.focused
        if isinstance(w, QueueTable):
            w.action_cursor(delta)
        elif isinstance(w, DataTable):
            (w.action_cursor_down if delta > 0 else w.action_cursor_up)()
        elif w is not None and hasattr(w, "scroll_down"):
            (w.scroll_down if delta > 0 else w.scroll_up)()

    @property
    def dltop(self) -> Viewer:
        """The running app, as far as a screen needs it (not the concrete app: it
        imports the screens)."""
        return cast(Viewer, self.app)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def compose(self) -> ComposeResult:
        yield TitleBar(id="title")
        yield Static(id="too-small")
        with Pane(id="body"):
            yield from self.compose_body()
        # The running app's own keys (not an import of the app module: that was a cycle).
        keys: list[tuple[object, bool]] = [*((b, False) for b in self.BINDINGS),
                                           *((b, True) for b in self.dltop.BINDINGS)]
        if self.dltop.read_only:  # the actions refuse anyway: their keys are not offered
            keys = [(b, on_app) for b, on_app in keys
                    if not (isinstance(b, Binding) and steering(b.action))]
        yield KeyBar(keys, id="keys")

    def on_screen_resume(self) -> None:
        self.show_campaign(self.dltop.campaign_view)

    def show_campaign(self, view: CampaignView | None) -> None:
        """New campaign state; subclasses show more of it."""
        self.query_one(TitleBar).show(view, self.dltop.db_label, self.dltop.newer_campaign,
                                      self.dltop.read_only)

    def show_devices(self, frame: DeviceFrame) -> None:
        """New device readings (only the main screen shows them)."""

    def show_too_small(self, width: int, height: int) -> None:
        self.query_one("#too-small", Static).update(TOO_SMALL.format(w=width, h=height))


class QueueHint(Static):
    """What to do with an empty queue (no database or no campaign yet)."""

    DEFAULT_CSS = "QueueHint { height: auto; padding: 1 2; color: $text-muted; }"

    def show(self, view: CampaignView | None, db_path: str, exists: bool) -> None:
        self.display = view is None
        if view is None:
            where = "" if exists else f"; {db_path} is created then"
            if getattr(self.app, "read_only", False):
                self.update(Text("No campaign yet. This viewer is read-only: it shows the "
                                 "campaigns that dltop run or a steering viewer start. The "
                                 "devices above are live."))
                return
            self.update(Text(f"No campaign yet. Press a to add a profile (a built-in one such "
                             f"as quick, or a .toml file){where}. The devices above are live."))


class MainScreen(DltopScreen):
    """Devices, the queue and the current run."""

    VERTICAL_BREAKPOINTS = [(0, "-short"), (25, "-tall")]  # -short: no room for GPU processes

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
        # In a container of their own: a device frame repaints the devices' lines, and
        # Textual draws again every widget whose container overlaps them; in #body that
        # was the queue, its header and scroll bar and the run panel, at every frame.
        with Pane(id="lower"):
            yield GpuProcsPanel(id="gpu-procs")
            yield QueueHeader(id="queue-header")
            yield QueueHint(id="queue-hint")
            yield QueueTable(id="queue")
            yield RunPanel(id="run")

    def show_campaign(self, view: CampaignView | None) -> None:
        super().show_campaign(view)
        self.show_queue(view)
        app = self.dltop
        self.query_one(QueueHint).show(view, one_line(app.db_label), app.db_path.is_file())
        self.query_one(KeyBar).relabel("app.toggle_pause",
                                       "Resume" if view is not None and view.paused else "Pause")
        others = max(0, len(view.progress) - 1) if view else 0
        self.query_one(RunPanel).show(view.current if view else None, others,
                                      view.eta if view else None)

    def show_devices(self, frame: DeviceFrame) -> None:
        self.query_one(DevicesPanel).show(frame)
        self.query_one(GpuProcsPanel).processes = frame.processes

    def on_queue_table_rows_wanted(self, msg: QueueTable.RowsWanted) -> None:
        self.dltop.want_queue_rows(msg.offset, msg.limit)

    def show_queue(self, view: CampaignView | None) -> None:
        """The queue's rows of ``view`` (alone: another window of it was read)."""
        table = self.query_one(QueueTable)
        table.show(view)
        header = self.query_one(QueueHeader)
        header.number_width, header.settings = table.number_width, table.has_settings
        header.model_width = table.model_width

    def action_move(self, delta: int) -> None:
        table = self.query_one(QueueTable)
        job = table.selected_job
        if job is not None:
            table.preview_move(delta)  # the user sees it now; the database follows
            self.dltop.action_move_job(job, delta)

    def action_remove(self) -> None:
        table = self.query_one(QueueTable)
        job = table.selected_line
        if job is not None:
            self.dltop.confirm_remove(job, table.cursor_row)

    def action_open_run(self) -> None:
        """The selected job's run detail screen (its latest run)."""
        job = self.query_one(QueueTable).selected_job
        if job is not None:
            self.app.push_screen(RunDetailScreen(self.dltop.db_path, job,
                                                 poll_s=1.0 / self.dltop.db_hz))


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
