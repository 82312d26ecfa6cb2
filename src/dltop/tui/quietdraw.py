"""Containers that hand the compositor their last lines when nothing in them changed.

When one widget repaints a line, Textual's compositor asks every widget whose *parent's*
visible area overlaps that line for all of its lines (``Widget.render_lines`` over the
widget's whole region), and each of those lines goes through the widget's style cache
and the app's line filters again, drawn or not. For a device frame of the main screen
that was 128 lines from 8 widgets, 116 of them the screen's, ``#body``'s, ``#lower``'s
and the device panel's background (counted by wrapping ``render_lines`` inside
``dltop tui --fake-gpus 8`` in tmux). :class:`CachedLines` keeps the strips it returned
and returns them again while the request, the widget's size and line filters are the
same (and, for a widget with links, the style under the mouse) and its style cache
holds every line clean: whatever makes Textual draw the widget
again (a refresh, a resize, a new theme) dirties or clears that cache first.

This reads two attributes of Textual's ``StylesCache`` (``_dirty_lines`` and ``_cache``);
``tests/tui/test_quietdraw.py`` fails if a Textual release renames them.
"""

from __future__ import annotations

from textual.containers import Vertical
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


class CachedLines(Widget):
    """Mixin for containers: :meth:`render_lines` answers from its last strips when valid."""

    _last_lines: tuple[object, list[Strip]] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        cache = self._styles_cache
        # a link's hover style is drawn over the cached lines without a refresh
        key = (crop, self.region.size, tuple(map(id, self.get_line_filters())),
               self.hover_style if self.auto_links else None)
        last = self._last_lines
        if (last is not None and last[0] == key and not cache._dirty_lines
                and all(y in cache._cache for y in crop.line_range)):
            return last[1]
        strips = super().render_lines(crop)
        self._last_lines = (key, strips)
        return strips


class Pane(CachedLines, Vertical):
    """A ``Vertical`` whose background is not drawn again at every device frame."""
