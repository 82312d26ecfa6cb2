"""A one-line key bar: the screen's keys, clickable, laid out once per width.

Textual's Footer rebuilds a widget per key on every screen switch, which cost
most of a switch's 150-300 ms on our 2-core machine; this bar is one Static
whose text is fixed per screen and width. When the keys do not fit, the last
ones give way, but Help and Quit always stay (Help lists every key).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.widgets import Static

from dltop.tui.quietdraw import CachedLines

ALWAYS_SHOWN = frozenset({"help", "quit_viewer"})
"""Actions kept on a narrow bar, whatever else has to go."""


@dataclass(frozen=True)
class _Key:
    key: str
    label: str
    action: str
    on_app: bool

    @property
    def width(self) -> int:
        return len(self.key) + len(self.label) + 3


class KeyBar(CachedLines, Static):
    """Shows ``key label`` for every shown binding of the screen and the app."""

    def __init__(self, bindings: list[tuple[object, bool]], **kw: object) -> None:
        """``bindings``: (binding, True if the app rather than the screen handles it)."""
        super().__init__(**kw)  # type: ignore[arg-type]
        self._keys = [_Key(b.key_display or b.key.split(",")[0], b.description, b.action,
                           on_app)
                      for b, on_app in bindings if isinstance(b, Binding) and b.show]
        self._spans: list[tuple[int, int, str, bool]] = []
        self._laid_out: tuple[int, Text] | None = None

    def _layout(self, width: int) -> Text:
        kept = [k for k in self._keys if k.action in ALWAYS_SHOWN]
        room = width - sum(k.width for k in kept)
        others: list[_Key] = []
        for k in (k for k in self._keys if k.action not in ALWAYS_SHOWN):
            if k.width > room:
                break  # keep the order: no later, shorter key jumps the queue
            others.append(k)
            room -= k.width
        shown = [k for k in self._keys if k in others or k in kept]
        text = Text(no_wrap=True, overflow="ellipsis")
        self._spans = []
        for k in shown:
            start = len(text)
            text.append(f" {k.key} ", "bold reverse")
            text.append(f"{k.label} ")
            self._spans.append((start, len(text), k.action, k.on_app))
        return text

    def relabel(self, action: str, label: str) -> None:
        """Say ``label`` for ``action``'s key (``p``: Pause, or Resume while paused)."""
        keys = [k if k.action != action else _Key(k.key, label, k.action, k.on_app)
                for k in self._keys]
        if keys != self._keys:
            self._keys, self._laid_out = keys, None
            self.refresh()

    def render(self) -> Text:
        width = self.size.width or 10_000
        if self._laid_out is None or self._laid_out[0] != width:
            self._laid_out = (width, self._layout(width))
        return self._laid_out[1]

    async def on_click(self, event: Click) -> None:
        for start, end, action, on_app in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action,
                                          default_namespace=self.app if on_app else self.screen)
                return
