"""Containers that return their last lines while nothing in them changed (tui/quietdraw.py),
and that draw again when something did."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import Static

from dltop.tui.quietdraw import Pane


class _Demo(App[None]):
    def compose(self) -> ComposeResult:
        with Pane(id="pane"):
            yield Static("hello", id="inside")


def test_textual_still_has_what_the_cache_reads() -> None:
    # quietdraw reads these two attributes of Textual's StylesCache: a release that
    # renames them must fail here, not draw stale lines
    pane = Pane()
    assert isinstance(pane._styles_cache._dirty_lines, set)
    assert isinstance(pane._styles_cache._cache, dict)


async def test_a_pane_draws_again_only_when_it_changed() -> None:
    app = _Demo()
    async with app.run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        pane = app.query_one(Pane)
        crop = Region(0, 0, pane.size.width, pane.size.height)
        first = pane.render_lines(crop)
        assert pane.render_lines(crop) is first  # nothing changed: the same strips
        # a child's change does not touch the pane's own lines
        app.query_one("#inside", Static).update("changed")
        await pilot.pause()
        assert pane.render_lines(crop) is first
        # the pane's own style does
        pane.styles.background = "red"
        await pilot.pause()
        redrawn = pane.render_lines(crop)
        assert redrawn is not first
        assert any(s.style is not None and s.style.bgcolor is not None
                   and s.style.bgcolor.triplet == (255, 0, 0)
                   for strip in redrawn for s in strip)
        # a repaint of one line, another request or another size draws again
        pane.refresh(Region(0, 0, pane.size.width, 1))
        assert pane.render_lines(crop) is not redrawn
        again = pane.render_lines(crop)
        assert pane.render_lines(Region(0, 0, pane.size.width, 2)) is not again
        await pilot.resize_terminal(50, 12)
        await pilot.pause()
        assert len(pane.render_lines(Region(0, 0, pane.size.width, pane.size.height))[0]
                   .text) == 50
