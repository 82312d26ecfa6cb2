"""What the idle viewer redraws: the device rows drawn straight from their parts
(tui/partsline.py) draw what Textual's Static draws; a read that changed nothing
redraws nothing; a cursor
move repaints two rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.segment import Segment
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import Static

from dltop.live.devices import DevicePoller
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.model import HostSample
from dltop.tui.devices import GpuRow, HostRow
from dltop.tui.partsline import PartsLine
from dltop.tui.queue import QueueTable
from dltop.tui.screens import TitleBar

from .conftest import SteppingClock, fixed_host, make_app, seed


def _static_line(row: PartsLine) -> Strip:
    """Line 0 as Static draws it (Text -> Content -> strips), whatever the row's cache."""
    row._render_content()
    return Static.render_line(row, 0)


def _segments(strip: Strip) -> list[Segment]:
    return [Segment(s.text, s.style) for s in strip]


async def test_rows_draw_the_same_segments_as_static(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=8)
    poller = DevicePoller(FakeGpuBackend(8, clock_ns=SteppingClock()), fixed_host)
    async with app.run_test(size=(120, 40)) as pilot:
        rows: list[PartsLine] = [*app.screen.query(GpuRow), app.screen.query_one(HostRow)]
        await pilot.pause()
        for row in rows:  # before the first reading: "waiting for the first reading"
            assert _segments(row.render_line(0)) == _segments(_static_line(row))
        for _ in range(40):
            app.screen.show_devices(poller.poll())  # type: ignore[attr-defined]
        await pilot.pause()
        rows = [*app.screen.query(GpuRow), app.screen.query_one(HostRow)]
        assert len(rows) == 9
        for row in rows:
            fast = row.render_line(0)
            assert fast.cell_length <= row.size.width
            assert "".join(s.text for s in fast) == row.render().plain
            # the same texts with the same styles, offsets (text selection) included
            assert _segments(fast) == _segments(_static_line(row))
            assert {s.style.color for s in fast} != {None}  # graphs are coloured

        # A line that does not fit is drawn by Static (wrapped at a word, the rest hidden).
        host = app.screen.query_one(HostRow)
        host.push(HostSample(0, (50.0,) * 4, 1.0, 2**30, 2**34, 12345678.0))
        host.styles.width = 30
        await pilot.pause()
        assert len(host.render().plain) > 30
        line = host.render_line(0)
        assert 0 < line.cell_length <= 30
        assert _segments(line) == _segments(_static_line(host))


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
