"""Messages the TUI's workers and screens post upward (tests assert on them)."""

from __future__ import annotations

from textual.message import Message

from dltop.live.campaign import CampaignView
from dltop.live.devices import DeviceFrame
from dltop.results.queries import CampaignRow


class DevicesUpdated(Message):
    """A new device frame was read."""

    def __init__(self, frame: DeviceFrame) -> None:
        super().__init__()
        self.frame = frame


class CampaignUpdated(Message):
    """A new campaign view was read from the database (None: no campaign yet)."""

    def __init__(self, view: CampaignView | None, newer: CampaignRow | None = None) -> None:
        super().__init__()
        self.view = view
        self.newer = newer
        """The newest campaign, when it is active and not the one shown."""


class ActionDone(Message):
    """A user action reached the database or the engine; ``text`` says what happened."""

    def __init__(self, action: str, text: str, ok: bool = True) -> None:
        super().__init__()
        self.action = action
        self.text = text
        self.ok = ok
