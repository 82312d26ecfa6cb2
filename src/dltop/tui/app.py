"""The dltop TUI: a viewer attached to the database and the live engine.

It never runs benchmarks itself. Device readings and database reads happen in
worker threads at a fixed rate, so bursts (a run flooding its log, thousands of
iterations) coalesce into one update per tick and the event loop never blocks.
A worker that fails says so in an error notification; a failed polling loop is
started again after a back-off, so the screen never freezes on stale data.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import sqlite_utils
from textual import events, work
from textual.binding import Binding
from textual.driver import Driver
from textual.events import Resize
from textual.worker import Worker, WorkerState, get_current_worker

from dltop.catalog import ACTIVE_CAMPAIGN_STATUSES
from dltop.live.campaign import (
    QUEUE_WINDOW,
    CampaignView,
    engine_changed,
    read_campaign,
    read_window,
)
from dltop.live.devices import DeviceFrame, DevicePoller, RemoteGpuReader
from dltop.results.queries import CampaignRow, campaigns
from dltop.store import connect
from dltop.store.read.changes import data_version
from dltop.telemetry.host import HostSampler
from dltop.telemetry.values import GpuBackend, HostSample
from dltop.textsafe import multiline
from dltop.tui import ops
from dltop.tui.actions import Actions
from dltop.tui.driver import quiet_driver
from dltop.tui.messages import ActionDone, CampaignUpdated, DevicesUpdated
from dltop.tui.modes import ScreenModes
from dltop.tui.palette import DltopCommands
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.screens import DltopScreen, HistoryScreen, MainScreen
from dltop.tui.viewer import Viewer

MIN_SIZE = (80, 24)
IDLE_POLL_S = 2.0
"""Seconds between database polls while no campaign is active (no engine with work to
do); a key press polls at once."""
POLL_RETRY_MAX_S = 30.0
"""Longest wait before a failed polling loop starts again (the wait doubles per failure)."""
_WHAT = {"db-poll": "reading the database", "device-poll": "reading the devices",
         "resume": "resuming campaigns", "results": "computing the results",
         "history": "reading the history", "refresh": "refreshing",
         "open": "opening the campaign", "rows": "reading the queue"}


class DltopApp(Actions, ScreenModes):
    """Main, results and history screens over one database (the actions: actions.py;
    switching screens: modes.py)."""

    CSS_PATH = Path(__file__).with_name("dltop.tcss")
    TITLE = "dltop"
    MODES = {"main": MainScreen, "results": ResultsScreen, "history": HistoryScreen}
    DEFAULT_MODE = "main"
    BINDINGS = [
        Binding("1", "switch_mode('main')", "Main"),
        Binding("2", "switch_mode('results')", "Results"),
        Binding("3", "switch_mode('history')", "History"),
        Binding("e", "export", "Export", show=False),
        Binding("f", "follow_newest", "Follow newest", show=False),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("q,f10", "quit_viewer", "Quit"),
    ]
    COMMANDS = {DltopCommands}
    """Ctrl+P offers dltop's own commands (not Textual's theme and screenshot ones)."""

    def __init__(self, db_path: Path, logs_dir: Path, backend: GpuBackend | None, *,
                 campaign_id: int | None = None, device_hz: float = 4.0, db_hz: float = 2.0,
                 host: Callable[[], HostSample | None] | None = None,
                 live: bool = True, resume_orphans: bool = True,
                 freeze_gc: bool = False, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only
        """Watch only (``dltop tui --read-only``, what ``dltop serve`` runs): the actions in
        :data:`~dltop.tui.actions.STEERING` refuse, and no engine is started."""
        self.freeze_gc = freeze_gc
        """Freeze what start-up made out of the collector's scans once every screen is
        composed (``dltop tui``; not in tests, where many apps share one process)."""
        self.db_path = db_path
        self.db_label = str(db_path)
        self.logs_dir = logs_dir
        self.backend = backend
        self.followed = campaign_id
        """Campaign shown; None follows the newest."""
        self.newer_campaign: CampaignRow | None = None
        """While another campaign than the newest is shown: the newest, if it is active."""
        self.device_hz, self.db_hz = device_hz, db_hz
        self.live = live
        self.resume_orphans = resume_orphans and not read_only
        self.campaign_view: CampaignView | None = None
        self.queue_window = (0, QUEUE_WINDOW)
        """(first row, rows) of the queue that reads fetch: the queue table's window."""
        self.device_frame: DeviceFrame | None = None
        self.metric = "time"
        """The results screen's metric, which its export writes."""
        self._poller = (DevicePoller(backend, host or HostSampler().glance)
                        if backend is not None else None)
        self._remote = RemoteGpuReader()
        self._db_lock = threading.Lock()
        self._db: sqlite_utils.Database | None = None
        self._db_key: tuple[int, int | None, tuple[int, int]] | None = None
        self.poll_retry_s = 1.0
        """First wait before a failed polling loop runs again."""
        self._poll_failures: dict[str, int] = {}  # group -> failures in a row
        self._poll_wake = threading.Event()

    def get_driver_class(self) -> type[Driver]:
        return quiet_driver(super().get_driver_class())

    # reading -------------------------------------------------------------------
    def _read_campaign(self, force: bool = True
                       ) -> tuple[bool, CampaignView | None, CampaignRow | None]:
        """(changed, view, newer active campaign). Unless forced, an unchanged database is
        not read again."""
        with self._db_lock:  # the reader connection is shared by the worker threads
            db = self._reader()
            if db is None:  # no database yet: nothing to show but the devices
                return force, None, None
            version = data_version(db)
            key = (version, self.followed, self.queue_window)
            last = self.campaign_view
            # A run's log grows outside the database, and the engine's liveness is not in it.
            quiet = (not force and key == self._db_key and
                     (last is None or (last.current is None and not engine_changed(last))))
            if quiet:
                return False, last, self.newer_campaign
            newest = campaigns(db, limit=1)
            cid = self.followed if self.followed is not None else \
                (newest[0].id if newest else None)
            newer = newest[0] if newest and newest[0].id != cid and \
                newest[0].status in ACTIVE_CAMPAIGN_STATUSES else None
            offset, limit = self.queue_window
            view = None if cid is None else read_campaign(db, cid, offset, limit)
            self._db_key = key  # only once read: a read that failed is tried again
            return True, view, newer

    def _reader(self) -> sqlite_utils.Database | None:
        """The viewer's one read connection (call with ``_db_lock`` held); None while
        there is no database (looking creates none: adding a campaign does)."""
        if self._db is None:
            if not self.db_path.is_file() or self.db_path.stat().st_size == 0:
                return None  # not there, or just created by an engine and not yet written
            self._db = connect(self.db_path, create=False)
        return self._db

    def ensure_database(self) -> None:
        """Create the database if there is none (before a campaign is added; any thread).

        Raises:
            UserError: its directory cannot be created or written (shown in the Add dialog).
        """
        with self._db_lock:
            if self._db is None and not (self.db_path.is_file()
                                         and self.db_path.stat().st_size):
                self._db = connect(self.db_path, create=True)
                self._db_key = None  # the next read reads

    def on_unmount(self) -> None:
        self._poll_wake.set()  # the poll loop sees its cancellation now, not in 2 s
        # A viewer that quits leaves no connection behind (nor a read snapshot that
        # would hold the engine's WAL checkpoints back).
        with self._db_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    async def on_mount(self) -> None:
        if self.resume_orphans:
            self._resume_orphans()
        if self.live:
            self._db_loop()
            if self._poller is not None:
                self._device_loop()
        await self._compose_screens()
        if self.freeze_gc:
            # Full collections scan every tracked object (14 ms here, traced inside
            # keypresses); the screens' widgets and styles live as long as the viewer.
            gc.collect()
            gc.freeze()

    @work(thread=True, group="db-poll", exit_on_error=False)
    def _db_loop(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            # An unchanged database costs one pragma and a pid check: no read, no redraw.
            changed, view, newer = self._read_campaign(force=False)
            self._poll_failures.pop("db-poll", None)
            if changed:
                self.post_message(CampaignUpdated(view, newer))
            wait = 1.0 / self.db_hz
            if view is None or not view.active:  # nothing runs: poll slower, keys wake it
                wait = max(wait, IDLE_POLL_S)
            self._poll_wake.wait(wait)
            self._poll_wake.clear()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            self._poll_wake.set()  # someone is looking: the idle poll's wait ends now
        await super().on_event(event)

    def want_queue_rows(self, offset: int, limit: int) -> None:
        """Read this window of the queue now, and at every later read."""
        self.queue_window = (offset, limit)
        self._read_rows()

    @work(thread=True, group="rows", exclusive=True, exit_on_error=False)
    def _read_rows(self) -> None:
        view = self.campaign_view
        if view is None:
            _, view, newer = self._read_campaign()
            self.post_message(CampaignUpdated(view, newer))
            return
        # Only the rows (the counts and the run panel come with the next tick), and only
        # the queue redrawn: updating the title bar and run panel re-lays out the screen.
        with self._db_lock:
            db = self._reader()
            assert db is not None  # a campaign was read from it
            view = read_window(db, view, *self.queue_window)
        self.call_from_thread(self._show_rows, view)

    def _show_rows(self, view: CampaignView) -> None:
        current = self.campaign_view
        if current is None or current.campaign.id != view.campaign.id:
            return  # another campaign is shown now
        # The newest counts and run, whichever read brought them, with these rows.
        self.campaign_view = replace(current, jobs=view.jobs, jobs_offset=view.jobs_offset)
        if isinstance(self.screen, MainScreen):
            self.screen.show_queue(self.campaign_view)

    @work(thread=True, group="device-poll", exit_on_error=False)
    def _device_loop(self) -> None:
        worker, poller = get_current_worker(), self._poller
        assert poller is not None
        while not worker.is_cancelled:
            t0 = time.monotonic()
            self.post_message(DevicesUpdated(self._with_remote(poller.poll())))
            self._poll_failures.pop("device-poll", None)
            time.sleep(max(0.0, 1.0 / self.device_hz - (time.monotonic() - t0)))

    def _with_remote(self, frame: DeviceFrame) -> DeviceFrame:
        """The frame with the running run's GPUs on other nodes (a Slurm run's agents)."""
        view = self.campaign_view
        run_id = view.current.run_id if view is not None and view.current else None
        with self._db_lock:
            db = self._reader() if run_id is not None else None
            remote = self._remote.read(db, run_id) if db is not None else ()
        return replace(frame, remote=remote) if remote else frame

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Show a failed worker's error; start a failed polling loop again after a back-off."""
        if event.state != WorkerState.ERROR:
            return
        group, exc = event.worker.group, event.worker.error
        self.log.error(f"{_WHAT.get(group, group)} failed", exc)  # every one, not once a streak
        restart = {"db-poll": self._db_loop, "device-poll": self._device_loop}.get(group)
        failures = self._poll_failures.get(group, 0) + 1
        if restart is not None:
            self._poll_failures[group] = failures
            # Doubling waits: a read that always fails is retried every 30 s, not spun on.
            delay = min(POLL_RETRY_MAX_S, self.poll_retry_s * 2 ** (failures - 1))
            self.set_timer(delay, restart)
        if failures == 1:  # once per streak: a dead database does not flood the screen
            suffix = "; retrying" if restart is not None else ""
            self.notify(multiline(f"{_WHAT.get(group, group)} failed: {type(exc).__name__}: "
                                  f"{exc}{suffix}"), severity="error", timeout=10, markup=False)

    async def refresh_now(self) -> None:
        """Read the database and the devices once and show them (tests; after an edit)."""
        import asyncio

        _, view, newer = await asyncio.to_thread(self._read_campaign)
        self.post_message(CampaignUpdated(view, newer))
        if self._poller is not None:
            self.post_message(DevicesUpdated(await asyncio.to_thread(self._poller.poll)))

    def on_campaign_updated(self, msg: CampaignUpdated) -> None:
        self.campaign_view = msg.view
        self.newer_campaign = msg.newer
        if self.is_running and isinstance(self.screen, DltopScreen):  # not while closing
            self.screen.show_campaign(msg.view)

    def on_devices_updated(self, msg: DevicesUpdated) -> None:
        self.device_frame = msg.frame
        if self.is_running and isinstance(self.screen, DltopScreen):
            self.screen.show_devices(msg.frame)

    def on_resize(self, event: Resize) -> None:
        small = event.size.width < MIN_SIZE[0] or event.size.height < MIN_SIZE[1]
        self.set_class(small, "-too-small")
        if isinstance(self.screen, DltopScreen):
            self.screen.show_too_small(event.size.width, event.size.height)

    @work(thread=True, group="resume", exit_on_error=False)
    def _resume_orphans(self) -> None:
        """Campaigns whose engine died (reboot, SIGKILL) get a new engine, which reaps
        their orphaned runners and re-queues the interrupted runs (``run --resume``)."""
        for text in ops.resume_orphans(self.db_path, self.logs_dir):
            self.post_message(ActionDone("resume", text))

    # results and history ---------------------------------------------------------
    @work(thread=True, group="history", exclusive=True, exit_on_error=False)
    def refresh_history(self) -> None:
        with self._db_lock:
            db = self._reader()
            rows = [] if db is None else campaigns(db, limit=200)
        self.call_from_thread(self._show_history, rows)

    def _show_history(self, rows: list) -> None:  # type: ignore[type-arg]
        if isinstance(self.screen, HistoryScreen):
            self.screen.show_history(rows)

    def open_campaign(self, campaign_id: int) -> None:
        """Show this campaign (history's enter) on the results screen."""
        self.followed = campaign_id
        self.campaign_view = None
        self.run_worker(self.refresh_now(), exclusive=True, group="open", exit_on_error=False)
        self.switch_mode("results")

    def on_action_done(self, msg: ActionDone) -> None:
        if msg.text:
            # names, paths and errors from data: literal text, control characters escaped
            self.notify(multiline(msg.text), severity="information" if msg.ok else "error",
                        timeout=4 if msg.ok else 10, markup=False)
        self.run_worker(self.refresh_now(), group="refresh", exit_on_error=False)


def _as_viewer(app: DltopApp) -> Viewer:
    # Never called: mypy checks here that the app is the Viewer its screens rely on.
    return app
