"""How the viewer's screens (its modes) are switched: each composed once, at start-up,
and a switch to a composed screen without Textual's 50 ms hold on repaints."""

from __future__ import annotations

from contextlib import ExitStack

from textual.app import App
from textual.widget import AwaitMount


class ScreenModes(App[str | None]):
    """An app whose modes are all composed at start-up (a mixin of the viewer's app)."""

    def __init__(self) -> None:
        super().__init__()
        self.composing_screens = False
        """True while the screens are composed, unseen, at start-up."""
        self._composed_modes = {self.DEFAULT_MODE}  # composed at start-up
        self._hold_repaints = True

    def switch_mode(self, mode: str) -> AwaitMount:
        # Textual holds every repaint for 50 ms after a mode switch (delay_update), to hide
        # a screen while it is composed. Ours are composed on their first switch only; after
        # that the hold was 50 of the ~70 ms a switch took through tmux (headless tests never
        # saw it: they do not paint). Repaints are still held, but only until the screen has
        # handled its resume: painting before that drew parts of it over the old screen.
        if mode not in self._composed_modes:
            self._composed_modes.add(mode)
            return super().switch_mode(mode)
        hold = ExitStack()
        hold.enter_context(self.batch_update())
        self._hold_repaints = False
        try:
            mounted = super().switch_mode(mode)
        except BaseException:
            hold.close()
            raise
        finally:
            self._hold_repaints = True

        def release() -> None:
            hold.close()
            self.screen.refresh()

        self.screen.call_after_refresh(release)  # runs once its queue (the resume) is done
        return mounted

    def delay_update(self, delay: float = 0.05) -> None:
        if self._hold_repaints:
            super().delay_update(delay)

    async def _compose_screens(self) -> None:
        """Compose every screen at start-up, and show each twice under one held repaint.

        A screen's first visit composes it and brings its widgets' CSS into the
        stylesheet; its second visit then re-parsed the whole stylesheet and restyled
        every widget (Textual marks a screen's styles current only once it was shown
        mounted), which dropped the results table's render caches: 115 ms and 70 ms
        through tmux, the two slowest keypresses of a session (traced with
        benchmarks/tui_latency.py --trace). Done in the app's mount handler, so keys
        pressed meanwhile wait for the main screen (about 60 ms more start-up).
        """
        self.composing_screens = True
        try:
            with self.batch_update():
                for _ in range(2):
                    for mode in self.MODES:
                        if mode != self.DEFAULT_MODE:
                            await self.switch_mode(mode)
                    await self.switch_mode(self.DEFAULT_MODE)
        finally:
            self.composing_screens = False
