"""A one-line key bar: the screen's keys, clickable, drawn once.

Textual's Footer rebuilds a widget per key on every screen switch, which cost
most of a switch's 150-300 ms on our 2-core machine; this bar is one Static
whose text is fixed per screen.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.widgets import Static


class KeyBar(Static):
    """Shows ``key label`` for every shown binding of the screen and the app."""

    def __init__(self, bindings: list[tuple[object, bool]], **kw: object) -> None:
        """``bindings``: (binding, True if the app rather than the screen handles it)."""
        super().__init__(**kw)  # type: ignore[arg-type]
        self._spans: list[tuple[int, int, str, bool]] = []
        text = Text(no_wrap=True, overflow="ellipsis")
        for b, on_app in bindings:
            if not isinstance(b, Binding) or not b.show:
                continue
            key = b.key_display or b.key.split(",")[0]
            start = len(text)
            text.append(f" {key} ", "bold reverse")
            text.append(f" {b.description} ")
            self._spans.append((start, len(text), b.action, on_app))
        self._text = text

    def render(self) -> Text:
        return self._text

    async def on_click(self, event: Click) -> None:
        for start, end, action, on_app in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action,
                                          default_namespace=self.app if on_app else self.screen)
                return
