"""The viewer's commands: the keys' actions and the command palette's, in one place.

A mixin of :class:`dltop.tui.app.DltopApp`: every action that writes asks the
engine through the database in a worker (``DltopApp._do``); the ones that stop
or remove something ask first, naming what they act on, and act on exactly
that (the run shown when the key was pressed, not one that started since).

A read-only viewer (``dltop tui --read-only``, what ``dltop serve`` runs unless
``--control``) refuses every action in :data:`STEERING` here, in the action itself:
keys, key bar clicks and the palette all end in these methods.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App

from dltop.catalog import Control, JobStatus
from dltop.errors import DltopError
from dltop.live.campaign import CampaignView, JobLine
from dltop.results import labels
from dltop.textsafe import one_line
from dltop.tui import ops
from dltop.tui.messages import ActionDone
from dltop.tui.modals import ConfirmDialog, ExportDialog, HelpScreen, ProfilePicker, QuitDialog

STEERING = frozenset({"add_profile", "cancel_run", "toggle_pause", "retry_failed", "move",
                      "move_job", "remove", "remove_job", "export", "export_selected"})
"""The actions (as bindings name them) that change the queue, the engine or files; a
read-only viewer refuses them. Quitting it never stops the engine either."""


def steering(action: str) -> bool:
    """Whether a binding's action (``app.add_profile``, ``move(-1)``) is in STEERING."""
    return action.split("(", 1)[0].rsplit(".", 1)[-1] in STEERING


def job_label(job: JobLine, row: int) -> str:
    """``job #4: torch resnet-56 b64 cpu:1 bf16, repeat 1`` (``row``: its row in the
    queue): the run label (:func:`dltop.results.labels.compose`)."""
    return (f"job #{row + 1}: " + labels.compose(job.framework, job.model, job.batch_size,
                                                 job.device, job.settings)
            + f", repeat {job.repeat + 1}")


class Actions(App[str | None]):
    """The app's actions (keys, key bar clicks and the command palette run them)."""

    # the app's state they act on (set by DltopApp)
    db_path: Path
    logs_dir: Path
    followed: int | None
    campaign_view: CampaignView | None
    metric: str
    read_only: bool

    if TYPE_CHECKING:  # DltopApp's
        def ensure_database(self) -> None: ...
        async def refresh_now(self) -> None: ...

    @work(thread=True, group="edit", exit_on_error=False)
    def _do(self, action: str, fn: Callable[[], str]) -> None:
        """Run a blocking action off the loop, report it, refresh."""
        try:
            text, ok = fn(), True
        except DltopError as exc:
            text, ok = str(exc), False
        except Exception as exc:  # e.g. "database is locked": shown, never silent
            self.log.error(f"{action} failed", exc)
            text, ok = f"{action} failed: {type(exc).__name__}: {exc}", False
        self.post_message(ActionDone(action, text, ok))

    def refused(self, what: str) -> bool:
        """True (and says so) when this viewer is read-only and ``what`` steers."""
        if not self.read_only:
            return False
        self.notify(f"read-only viewer: {what} is turned off here (dltop serve --control, "
                    "or dltop tui without --read-only, can)", severity="warning", timeout=4)
        return True

    def _need_view(self) -> CampaignView | None:
        if self.campaign_view is None:
            self.notify("no campaign yet: press a to add a profile", severity="warning")
        return self.campaign_view

    def action_add_profile(self) -> None:
        if self.refused("adding a profile"):
            return
        from dltop.profiles.loader import builtin_names

        def queued(ref: str | None) -> None:
            if ref:
                self.followed = None  # a new campaign becomes the newest: follow it
                view = self.campaign_view
                self._do("add", lambda: ops.add_profile(self.db_path, self.logs_dir, ref,
                                                        view))

        # The database is created (if it is not there yet) once a profile passed its checks,
        # and a path that cannot hold one is reported in the dialog, nothing queued.
        self.push_screen(ProfilePicker(builtin_names(), before_add=self.ensure_database),
                         queued)

    def action_cancel_run(self) -> None:
        if self.refused("cancelling a run"):
            return
        view = self._need_view()
        if view is None:
            return
        run = view.current
        if run is None or not view.engine_alive:
            self.notify("no run in progress", severity="warning")
            return
        # Fixed now: confirming later never cancels a run that started meanwhile.
        campaign_id, run_id = view.campaign.id, run.run_id

        def chosen(yes: bool | None) -> None:
            if yes:
                self._do("cancel-run", lambda: ops.cancel_run(self.db_path, campaign_id,
                                                              run_id))

        self.push_screen(ConfirmDialog(
            f"Cancel run {run_id}?", f"run {run_id}: {one_line(run.label)}\n"
            "It stops now and is stored 'cancelled'; the queue goes on.",
            "(y) cancel the run"), chosen)

    def action_toggle_pause(self) -> None:
        if self.refused("pausing or resuming"):
            return
        if (view := self._need_view()) is not None:
            control = Control.RESUME if view.paused else Control.PAUSE
            self._do(control, lambda: ops.set_control(self.db_path, view, control))

    def action_retry_failed(self) -> None:
        if self.refused("retrying jobs"):
            return
        if (view := self._need_view()) is not None:
            self._do("retry", lambda: ops.retry_failed(self.db_path, self.logs_dir, view))

    def action_move_job(self, job_id: int, delta: int) -> None:
        if self.refused("moving a job"):
            return
        self._do("move", lambda: ops.move(self.db_path, job_id, delta))

    def confirm_remove(self, job: JobLine, row: int) -> None:
        """``x``: ask, naming the job, then take it out of the queue."""
        if self.refused("removing a job"):
            return
        if job.status != JobStatus.QUEUED:
            self.notify("only a queued job can be removed", severity="warning")
            return

        def chosen(yes: bool | None) -> None:
            if yes:
                self.action_remove_job(job.job_id)

        self.push_screen(ConfirmDialog(
            "Remove this job from the queue?", f"{job_label(job, row)}\nIt will not run "
            "(stored 'removed'; 'r' does not bring it back).", "(y) remove it"), chosen)

    def action_remove_job(self, job_id: int) -> None:
        if self.refused("removing a job"):
            return
        self._do("remove", lambda: ops.remove(self.db_path, job_id))

    def action_follow_newest(self) -> None:
        """Show the newest campaign again, and every newer one as it starts."""
        was = self.followed
        self.followed = None
        self.campaign_view = None
        self.run_worker(self.refresh_now(), exclusive=True, group="open", exit_on_error=False)
        self.notify("following the newest campaign" if was is not None
                    else "already following the newest campaign", timeout=3)

    def action_export(self, campaign_id: int | None = None) -> None:
        if self.refused("exporting to a file"):
            return
        view = self.campaign_view
        cid = campaign_id if campaign_id is not None else (view.campaign.id if view else None)
        if cid is None:
            self.notify("nothing to export yet", severity="warning")
            return

        def chosen(path: str | None) -> None:
            if path:
                self._do("export", lambda: ops.export(self.db_path, cid, path, self.metric))

        self.push_screen(ExportDialog(f"dltop-campaign-{cid}.md"), chosen)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_quit_viewer(self) -> None:
        view = self.campaign_view
        if view is None or not view.active or self.read_only:  # read-only: never the engine
            self.exit("quit")
            return

        async def chosen(choice: str | None) -> None:
            if choice == "leave":
                self.exit("leave")
            elif choice == "stop":
                import asyncio

                await asyncio.to_thread(ops.set_control, self.db_path, view, Control.CANCEL)
                self.exit("stop")

        self.push_screen(QuitDialog(), chosen)
