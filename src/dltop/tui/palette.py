"""The command palette (Ctrl+P): dltop's own commands, by name, with their keys.

Textual's default provider offers its theme, screenshot and key-panel commands; the
viewer's palette offers what its keys do instead, so a user who forgot a key finds
it by typing what they want ("pause", "export", "follow").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from dltop.catalog import CampaignStatus, Control, control_of
from dltop.tui.viewer import Viewer

Command = tuple[str, str, Callable[[], object]]
"""(name, help, callback)."""


def commands(app: Viewer) -> list[Command]:
    """The viewer's commands as they apply now (pause or resume, after the state; a
    read-only viewer's without the ones that steer)."""
    view = app.campaign_view
    paused = view is not None and (view.campaign.status == CampaignStatus.PAUSED
                                   or control_of(view.control) is Control.PAUSE)
    steer = {app.action_add_profile, app.action_toggle_pause, app.action_cancel_run,
             app.action_retry_failed, app.action_export}
    every: list[Command] = [
        ("Add a profile", "queue a built-in profile or a .toml file  [a]",
         app.action_add_profile),
        ("Resume the queue" if paused else "Pause the queue",
         "the run going on finishes first  [p]", app.action_toggle_pause),
        ("Cancel the current run", "stop the run going on (asks first); the queue goes on  [c]",
         app.action_cancel_run),
        ("Retry failed jobs", "queue crashed, timed-out and cancelled jobs again  [r]",
         app.action_retry_failed),
        ("Export results", "write the table to .md .csv .json or .tex  [e]",
         app.action_export),
        ("Main screen", "devices, queue and current run  [1]",
         lambda: app.switch_mode("main")),
        ("Results screen", "the campaign's results table  [2]",
         lambda: app.switch_mode("results")),
        ("History screen", "past campaigns; Enter opens one  [3]",
         lambda: app.switch_mode("history")),
        ("Follow the newest campaign", "show the newest campaign and every newer one  [f]",
         app.action_follow_newest),
        ("Help", "every key  [? F1]", app.action_help),
        ("Quit", "asks when a campaign is running  [q F10]", app.action_quit_viewer),
    ]
    return [c for c in every if not (app.read_only and c[2] in steer)]


class DltopCommands(Provider):
    """The palette's provider of dltop's commands."""

    def _commands(self) -> list[Command]:
        return commands(cast(Viewer, self.app))

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            # the help counts too: "stop" finds "Cancel the current run"
            score = max(matcher.match(name), matcher.match(help_text) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, text=name, help=help_text)
