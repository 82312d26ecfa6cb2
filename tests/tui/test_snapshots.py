"""Snapshot tests of the three screens: simulated GPUs on a stepping clock, fixed host."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dltop.live import campaign as live_campaign

from .conftest import make_app, seed


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Labelled fake: the title shows the engine as alive with a fixed pid.
    monkeypatch.setattr(live_campaign, "engine_alive", lambda pid, start: True)
    s = seed(tmp_path, engine_pid=None)
    from dltop.store import connect

    db = connect(s.db_path, create=False)
    with db.conn:
        db.execute("update campaigns set engine_pid = 4242")
    return s


async def _ticks(pilot: Pilot[Any], n: int) -> None:
    app = pilot.app
    for _ in range(n):
        await app.refresh_now()  # type: ignore[attr-defined]
        await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def test_main_screen_80x24(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded), terminal_size=(80, 24),
                        run_before=lambda p: _ticks(p, 12))


def test_main_screen_wide_two_gpus(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded, gpus=2), terminal_size=(140, 30),
                        run_before=lambda p: _ticks(p, 12))


def _switch_to(key: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """A ``run_before`` that lets the app settle, presses ``key``, and lets it settle again."""
    async def go(pilot: Pilot[Any]) -> None:
        await _ticks(pilot, 1)
        await pilot.press(key)
        await _ticks(pilot, 1)

    return go


def test_results_screen(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded), terminal_size=(100, 40), run_before=_switch_to("2"))


def test_history_screen(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded), terminal_size=(80, 24), run_before=_switch_to("3"))
