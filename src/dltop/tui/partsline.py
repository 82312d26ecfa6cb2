"""Lines drawn straight from styled parts, for the device rows redrawn at every frame.

A ``Static`` turns its Rich ``Text`` into Textual ``Content``, wraps and formats it and
converts every span's style again on each redraw: half of the idle viewer's event-loop
time once (8 GPU rows and the host row, four times a second; profiled with cProfile
inside ``dltop tui --fake-gpus 8``). And each row its own widget cost the compositor a
region, a background walk up the DOM and a style lookup per row and frame, and made
every screen switch restyle nine more widgets. :class:`PartsLines` is one widget of
many lines, each a list of ``(text, style)`` parts whose styles are converted once; a
line whose parts did not change is not repainted, and one that did repaints only
itself. ``render()`` still returns the ``Text`` of all lines (tests and text selection
read it); while text is selected the lines are drawn by Textual's own path.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

Parts = list[tuple[str, str]]
"""``(text, style)`` pieces of a line, in order; ``""`` is the widget's own style."""


def merge_parts(parts: Parts) -> Parts:
    """The parts as ``Content`` would segment them: runs of unstyled text as one, empty
    parts dropped."""
    merged: Parts = []
    for text, name in parts:
        if not text:
            continue
        if not name and merged and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + text, "")
        else:
            merged.append((text, name))
    return merged


class PartsLines(Widget):
    """A widget of one-line rows given as parts (:meth:`show_lines`), one per line."""

    DEFAULT_CSS = "PartsLines { height: auto; }"

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._lines: list[Parts] = []
        self._styles_base: Style | None = None
        self._styles: dict[str, Style] = {}
        self._rich: dict[tuple[str, int, int], RichStyle] = {}

    @property
    def lines(self) -> list[Parts]:
        """The lines as last shown."""
        return self._lines

    def show_lines(self, lines: list[Parts]) -> int:
        """Show these lines; repaint only those that changed. Returns how many did."""
        if len(lines) != len(self._lines):
            self._lines = list(lines)
            self.refresh(layout=True)  # a row came or went: the height changed
            return len(lines)
        width, changed = self.size.width, 0
        for y, parts in enumerate(lines):
            if parts != self._lines[y]:
                self._lines[y] = parts
                self.refresh(Region(0, y, width, 1))
                changed += 1
        return changed

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def render(self) -> Text:
        return Text("\n").join(Text.assemble(*((t, s or "") for t, s in parts),
                                             no_wrap=True, overflow="ellipsis")
                               for parts in self._lines)

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
        if self.text_selection is not None or y >= len(self._lines):
            return super().render_line(y)
        width = self.size.width
        base = self.visual_style
        if base is not self._styles_base or len(self._rich) > 4096:  # restyled, or resized
            self._styles_base, self._styles, self._rich = base, {}, {}
        rich = self._rich
        segments, x = [], 0
        for text, name in merge_parts(self._lines[y]):
            # The offset is what Content puts in each segment's style (text selection); a
            # row's parts start at the same columns frame after frame, so it is cached.
            style = rich.get((name, x, y))
            if style is None:
                style = rich[name, x, y] = self._style(name).rich_style_with_offset(x, y)
            segments.append(Segment(text, style))
            x += len(text)
        cells = sum(cell_len(s.text) for s in segments)
        strip = Strip(segments, cells)
        # Too long for the widget (a narrow terminal): cut at its edge, as no_wrap does.
        return strip.crop(0, width) if cells > width else strip
