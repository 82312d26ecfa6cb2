"""Snapshot tests of the three screens: simulated GPUs on a stepping clock, fixed host."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dltop.live import campaign as live_campaign
from dltop.live import devices as live_devices
from dltop.live.devices import DevicePoller
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import GpuProcess

from .conftest import SteppingClock, fixed_host, make_app, seed

T0 = 1_795_348_800.0  # conftest.FIXED_TIME as epoch seconds


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Labelled fakes: the title shows the engine as alive with a fixed pid; the viewer's
    # clock is pinned 83 s after the run started (its elapsed time and stall state).
    monkeypatch.setattr(live_campaign, "engine_alive", lambda *_: True)
    monkeypatch.setattr(live_campaign, "wall_clock", lambda: T0 + 83.0)
    s = seed(tmp_path, engine_pid=None)
    from dltop.store import connect

    db = connect(s.db_path, create=False)
    with db.conn:
        db.execute("update campaigns set engine_pid = 4242")
        # the run's iterations end 0.125 s apart, the last 3 s before the pinned clock,
        # with a falling loss; its process tree has one telemetry window
        db.execute("update iterations set t_wall_s = ? + idx * 0.125, loss = 3.0 - idx * 0.1",
                   [T0 + 80 - 11 * 0.125])
        db.execute("insert into host_samples (run_id, t_start_mono_s, n, tree_cpu_pct, "
                   "tree_rss_bytes, t_wall_s) values (?, 1.0, 2, 187.5, ?, ?)",
                   [s.run_id, 3 * 2**30 // 2, T0 + 79])
        # the ok run took 10 s: the campaign ETA has a pace
        db.execute("update runs set finished_at = '2026-11-22T12:00:10Z' where status = 'ok'")
    return s


async def _ticks(pilot: Pilot[Any], n: int) -> None:
    app = pilot.app
    for _ in range(n):
        await app.refresh_now()  # type: ignore[attr-defined]
        await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.slow
def test_main_screen_80x24(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded), terminal_size=(80, 24),
                        run_before=lambda p: _ticks(p, 12))


def test_main_screen_wide_two_gpus(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded, gpus=2), terminal_size=(140, 30),
                        run_before=lambda p: _ticks(p, 12))


def _procs(index: int) -> tuple[GpuProcess, ...]:
    return (GpuProcess(900_000 + index, (2 + index) * 2**30, 40.0 + index),) if index < 3 else ()


def test_main_screen_200x60_processes_throttle(snap_compare: Any, seeded: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Labelled fake: the simulated processes' pids exist nowhere; their owner and command
    # are given, not looked up.
    monkeypatch.setattr(live_devices, "describe_process",
                        lambda pid: ("bench", f"python train.py --gpu {pid % 10}"))
    backend = FakeGpuBackend(8, clock_ns=SteppingClock(), processes=_procs,
                             throttle=lambda i: 0x20 if i == 5 else 0)

    async def fill(pilot: Pilot[Any]) -> None:
        await _ticks(pilot, 2)
        # 300 more frames (75 s at 4 Hz) straight to the screen: the graphs fill the row
        poller = DevicePoller(backend, fixed_host)
        for _ in range(300):
            pilot.app.screen.show_devices(poller.poll())  # type: ignore[attr-defined]
        await pilot.pause()

    assert snap_compare(make_app(seeded, backend=backend), terminal_size=(200, 60),
                        run_before=fill)


def _switch_to(key: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """A ``run_before`` that lets the app settle, presses ``key``, and lets it settle again."""
    async def go(pilot: Pilot[Any]) -> None:
        await _ticks(pilot, 1)
        await pilot.press(key)
        await _ticks(pilot, 1)

    return go


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_results_screen(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded), terminal_size=(100, 40), run_before=_switch_to("2"))


def test_history_screen(snap_compare: Any, seeded: Any) -> None:
    assert snap_compare(make_app(seeded), terminal_size=(80, 24), run_before=_switch_to("3"))
