"""One-line widgets drawn straight from styled parts, for the rows redrawn at 4 Hz.

A ``Static`` turns its Rich ``Text`` into Textual ``Content``, wraps and formats it and
converts every span's style again on each redraw: half of the idle viewer's event-loop
time (8 GPU rows and the host row, four times a second; profiled with cProfile inside
``dltop tui --fake-gpus 8``). :class:`PartsLine` draws the same segments, with the same
styles, from a list of ``(text, style)`` parts and styles converted once; ``render()``
still returns the ``Text`` (tests read it), and anything unusual (a line too long for
the widget, which Static wraps; a text selection; a second line) takes ``Static``'s path.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.strip import Strip
from textual.style import Style
from textual.widgets import Static

Parts = list[tuple[str, str]]
"""``(text, style)`` pieces of a line, in order; ``""`` is the widget's own style."""


class PartsLine(Static):
    """A one-line ``Static`` whose content is :meth:`parts`, drawn without ``Content``."""

    _styles_base: Style | None = None
    _styles: dict[str, Style]
    _rich: dict[tuple[str, int], RichStyle]
    _drawn: tuple[int, Parts] | None = None
    """(width, parts) of the line as last shown: a frame that changes nothing is not drawn."""

    def parts(self) -> Parts:
        """The line as ``(text, style)`` parts (subclasses)."""
        raise NotImplementedError

    def _current_parts(self) -> Parts:
        width, drawn = self.size.width, self._drawn
        if drawn is not None and drawn[0] == width:
            return drawn[1]
        parts = self.parts()
        self._drawn = (width, parts)
        return parts

    def show_parts(self) -> None:
        """Repaint the line if its parts changed since it was last shown.

        An idle GPU reads the same figures frame after frame, and its graphs scroll the
        same characters: nothing to draw, and Textual's compositor not woken at all.
        """
        parts = self.parts()
        if self._drawn is None or parts != self._drawn[1]:
            self._drawn = (self.size.width, parts)
            self.refresh()

    def render(self) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        for text, style in self._current_parts():
            t.append(text, style or None)
        return t

    def _style(self, name: str) -> Style:
        """The base style with ``name`` over it, converted as ``Content`` converts it."""
        style = self._styles.get(name)
        if style is None:
            base, app = self._styles_base, self.app
            assert base is not None
            style = self._styles[name] = base if not name else \
                base + Style.from_rich_style(app.console.get_style(name), app.ansi_theme)
        return style

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y or self.text_selection is not None:
            return super().render_line(y)
        # Content draws each styled part as its own segment and runs of plain text as one.
        merged: Parts = []
        for text, name in self._current_parts():
            if not text:
                continue
            if not name and merged and not merged[-1][1]:
                merged[-1] = (merged[-1][0] + text, "")
            else:
                merged.append((text, name))
        cells = sum(cell_len(text) for text, _ in merged)
        if cells > width:
            return super().render_line(y)  # Static wraps it at a word (the rest is hidden)
        base = self.visual_style
        if base is not self._styles_base or len(self._rich) > 512:  # restyled, or resized
            self._styles_base, self._styles, self._rich = base, {}, {}
        rich = self._rich
        segments, x = [], 0
        for text, name in merged:
            # The offset is what Content puts in each segment's style (text selection); a
            # row's parts start at the same columns frame after frame, so it is cached.
            style = rich.get((name, x))
            if style is None:
                style = rich[name, x] = self._style(name).rich_style_with_offset(x, 0)
            segments.append(Segment(text, style))
            x += len(text)
        return Strip(segments, cells)
