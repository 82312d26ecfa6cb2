"""What the screens and the command palette need of the running app.

They depend on this protocol, not on :class:`dltop.tui.app.DltopApp`: the app module
imports the screens and the palette, and nothing in the package imports the app back
(tests/tui/test_import_circle.py keeps it so, ``TYPE_CHECKING`` imports included).
``app.py`` has mypy check that the app is a :class:`Viewer`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

from textual.binding import BindingType

from dltop.live.campaign import CampaignView, JobLine
from dltop.results.queries import CampaignRow


class Viewer(Protocol):
    """The app as its screens see it: its state and the actions they start."""

    BINDINGS: ClassVar[list[BindingType]]
    db_path: Path
    db_label: str
    db_hz: float
    """How often the database is read (a run detail screen polls as often)."""
    read_only: bool
    campaign_view: CampaignView | None
    newer_campaign: CampaignRow | None
    metric: str
    """The results screen's metric, which its export writes."""
    composing_screens: bool
    """True while the screens are composed unseen at start-up."""

    def want_queue_rows(self, offset: int, limit: int) -> None: ...

    def refresh_history(self) -> object: ...  # a worker

    def open_campaign(self, campaign_id: int) -> None: ...

    def switch_mode(self, mode: str) -> object: ...

    def confirm_remove(self, job: JobLine, row: int) -> None: ...

    def action_move_job(self, job_id: int, delta: int) -> None: ...

    def action_export(self, campaign_id: int | None = None) -> None: ...

    def action_add_profile(self) -> None: ...

    def action_toggle_pause(self) -> None: ...

    def action_cancel_run(self) -> None: ...

    def action_retry_failed(self) -> None: ...

    def action_follow_newest(self) -> None: ...

    def action_help(self) -> None: ...

    def action_quit_viewer(self) -> None: ...
