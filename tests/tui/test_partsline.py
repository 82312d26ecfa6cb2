"""What the idle viewer redraws: the device lines drawn straight from their parts
(tui/partsline.py) draw what Textual draws for their text; a read that changed nothing
redraws nothing; a cursor
move repaints two rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.segment import Segment
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from dltop.live.devices import DevicePoller
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import HostSample
from dltop.tui.devices import DeviceLines
from dltop.tui.queue import QueueTable
from dltop.tui.screens import TitleBar

from .conftest import SteppingClock, fixed_host, make_app, seed


def _textual_line(lines: DeviceLines, y: int) -> Strip:
    """Line ``y`` as Textual draws the widget's ``Text`` (Text -> Content -> strips), as a
    Static would, whatever the widget's own path."""
    lines._render_content()
    return Widget.render_line(lines, y)


def _segments(strip: Strip) -> list[Segment]:
    return [Segment(s.text, s.style) for s in strip]


async def test_device_lines_draw_the_same_segments_as_textual(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=8)
    poller = DevicePoller(FakeGpuBackend(8, clock_ns=SteppingClock()), fixed_host)
    async with app.run_test(size=(120, 40)) as pilot:
        lines = app.screen.query_one(DeviceLines)
        await pilot.pause()
        # before the first reading: "waiting for the first reading"
        assert "waiting for the first reading" in lines.render().plain
        for y in range(len(lines.lines)):
            assert _segments(lines.render_line(y)) == _segments(_textual_line(lines, y))
        for _ in range(40):
            app.screen.show_devices(poller.poll())  # type: ignore[attr-defined]
        await pilot.pause()
        assert len(lines.lines) == 9 and lines.size.height == 9
        plain = lines.render().plain.split("\n")
        for y in range(9):
            fast = lines.render_line(y)
            assert fast.cell_length <= lines.size.width
            assert "".join(s.text for s in fast) == plain[y]
            # the same texts with the same styles, offsets (text selection) included
            assert _segments(fast) == _segments(_textual_line(lines, y))
            assert {s.style.color for s in fast} != {None}  # graphs are coloured

        # A line that does not fit is cut at the widget's edge.
        lines.host.push(HostSample(0, (50.0,) * 4, 1.0, 2**30, 2**34, 12345678.0))
        lines.styles.width = 30
        await pilot.pause()
        lines.redraw()
        assert len(lines.render().plain.split("\n")[8]) > 30
        line = lines.render_line(8)
        assert line.cell_length == 30
        assert "".join(s.text for s in line) == lines.render().plain.split("\n")[8][:30]


async def test_a_frame_repaints_only_the_lines_that_changed(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=2)
    poller = DevicePoller(FakeGpuBackend(2, clock_ns=SteppingClock()), fixed_host)
    async with app.run_test(size=(120, 40)) as pilot:
        app.screen.show_devices(poller.poll())  # type: ignore[attr-defined]
        await pilot.pause()
        lines = app.screen.query_one(DeviceLines)
        assert len(lines.lines) == 3  # two GPUs and the host
        repaints: list[tuple[object, ...]] = []
        real = lines.refresh
        lines.refresh = lambda *a, **k: (repaints.append(a), real(*a, **k))[1]  # type: ignore[method-assign]
        lines.host.push(HostSample(0, (10.0,) * 2, 1.0, 2**30, 2**34, 0))
        assert lines.redraw() == 1  # the GPUs read nothing new
        assert len(repaints) == 1 and repaints[0][0].y == 2 and repaints[0][0].height == 1  # type: ignore[attr-defined]
        assert lines.redraw() == 0 and len(repaints) == 1


async def test_a_read_that_changes_nothing_lays_nothing_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The forced read every 5 s (and each read during a run) brings an equal title: the
    title bar is not updated (a Static update lays the whole screen out again)."""
    app = make_app(seed(tmp_path), gpus=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        bar = app.screen.query_one(TitleBar)
        shown = str(bar.render())
        assert "campaign" in shown
        updates: list[object] = []
        monkeypatch.setattr(bar, "update", lambda t: updates.append(t))
        for _ in range(3):
            await app.refresh_now()
            await pilot.pause()
        assert updates == [] and str(bar.render()) == shown
        app.newer_campaign = None
        app.screen.show_campaign(None)  # a change is shown
        assert len(updates) == 1 and "no campaign yet" in str(updates[0])


async def test_a_cursor_move_repaints_its_two_rows_and_leaves_no_stale_cursor(
        tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        table = app.screen.query_one(QueueTable)
        table.focus()
        crop = Region(0, 0, table.size.width, table.size.height)

        def reversed_rows() -> list[int]:
            # through the widget's line cache, as the compositor reads it
            return [y for y, strip in enumerate(table.render_lines(crop))
                    if any(s.style is not None and s.style.reverse for s in strip)]

        assert reversed_rows() == [0]
        repaints: list[object] = []
        real = table.refresh
        table.refresh = lambda *a, **k: (repaints.append(a), real(*a, **k))[1]  # type: ignore[method-assign]
        await pilot.press("down")
        await pilot.pause()
        assert table.cursor_row == 1 and reversed_rows() == [1]
        assert repaints and all(len(a) == 1 and a[0].height == 1 for a in repaints)  # rows
        await pilot.press("up", "up")
        await pilot.pause()
        assert table.cursor_row == 0 and reversed_rows() == [0]
