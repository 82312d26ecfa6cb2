"""Snapshots of the run detail screen: fixed run rows, fixed (simulated) telemetry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dltop.live import campaign as live_campaign
from dltop.store import connect
from dltop.tui.charts import RunChart
from dltop.tui.queue import QueueTable
from dltop.tui.rundetail import RunDetailScreen

from .conftest import make_app
from .detail_data import DetailSeed, seed_detail


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DetailSeed:
    # Labelled fake: the engine shows as alive; log paths relative to a fixed cwd, so
    # the screen does not show the test's temporary directory.
    monkeypatch.setattr(live_campaign, "engine_alive", lambda *_: True)
    d = seed_detail(tmp_path)
    monkeypatch.chdir(tmp_path)
    db = connect(d.seeded.db_path, create=False)
    with db.conn:
        db.execute("update runs set log_path = 'ok-runner.log' where id = ?", [d.ok_run])
        db.execute("update runs set log_path = 'gone/runner.log' where id = ?",
                   [d.crashed_run])
    return d


def open_detail(row: int) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def go(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await app.refresh_now()  # type: ignore[attr-defined]
        await pilot.pause()
        app.screen.query_one(QueueTable).move_cursor(row)
        await pilot.press("enter")
        for _ in range(400):
            screen = app.screen
            if isinstance(screen, RunDetailScreen) and screen.loads:
                break
            await pilot.pause(0.05)
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        for _ in range(400):  # the figures are built in workers, once laid out
            charts = [c for c in screen.query(RunChart) if not c.has_class("-hidden")]
            if all(c.built for c in charts):
                break
            await pilot.pause(0.05)
        await app.workers.wait_for_complete()
        await pilot.pause()

    return go


@pytest.mark.slow
def test_finished_run_80x24(snap_compare: Any, data: DetailSeed) -> None:
    assert snap_compare(make_app(data.seeded, gpus=0), terminal_size=(80, 24),
                        run_before=open_detail(0))


@pytest.mark.slow
def test_finished_run_200x60(snap_compare: Any, data: DetailSeed) -> None:
    assert snap_compare(make_app(data.seeded, gpus=0), terminal_size=(200, 60),
                        run_before=open_detail(0))


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_crashed_run_80x24(snap_compare: Any, data: DetailSeed) -> None:
    assert snap_compare(make_app(data.seeded, gpus=0), terminal_size=(80, 24),
                        run_before=open_detail(1))
