"""What the idle viewer costs: no timer that fires without work, no repaint of a device row
that reads the same, no database read while nothing changed (issue 32 item 5)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dltop.live.campaign import engine_changed
from dltop.live.devices import DeviceFrame
from dltop.procs import process_start_time
from dltop.telemetry.values import GpuSample, GpuStatic
from dltop.tui.app import DltopApp
from dltop.tui.devices import DevicesPanel

from .conftest import Seeded, make_app, seed


def _running_timers(app: DltopApp) -> list[str]:
    # Textual keeps each node's timers in a private set; a stopped or paused one is idle.
    out = []
    for mode in app.MODES:
        for screen in app._screen_stacks.get(mode, []):
            for node in [screen, *screen.walk_children()]:
                for t in list(node._timers):
                    if t._active.is_set() and t._task is not None and not t._task.done():
                        out.append(f"{type(node).__name__}: {t.name} every {t._interval} s")
    return out


async def test_an_idle_viewer_runs_no_timer(tmp_path: Path) -> None:
    """Textual's ProgressBar ran a 1 Hz timer and, with no run to show, a 15 Hz one, on
    every screen, whether it was shown or not."""
    app = make_app(Seeded(tmp_path / "none.db", 0, [], 0))  # no database: nothing runs
    async with app.run_test(size=(120, 40)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        assert app.campaign_view is None
        assert _running_timers(app) == []


def _static() -> GpuStatic:
    return GpuStatic(0, "Simulated GPU", None, 80 * 2**30, 700.0, None, None, True)


def _sample(util: float) -> GpuSample:
    return GpuSample(0, 0, util, 10.0, 2**30, 80 * 2**30, 100.0, "instant", None,
                     temperature_c=40.0, sm_clock_mhz=1500.0, simulated=True)


async def test_a_device_row_that_reads_the_same_is_not_redrawn(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        panel = app.screen.query_one(DevicesPanel)
        frame = DeviceFrame((_static(),), (_sample(50.0),), None, None)
        for _ in range(200):  # more readings than the graphs have columns: they are full
            panel.show(frame)
        lines = panel.lines
        drawn: list[int] = []
        real = lines.refresh
        lines.refresh = lambda *a, **kw: (drawn.append(1), real(*a, **kw))[1]  # type: ignore[method-assign]
        for _ in range(10):
            panel.show(frame)
        assert drawn == []  # the same figures, and the graphs scrolled equal characters
        panel.show(replace(frame, gpus=(_sample(90.0),)))
        assert len(drawn) == 1
        await pilot.pause()
        assert " 90% " in "".join(s.text for s in lines.render_line(0))


async def test_an_unchanged_database_is_not_read_again(tmp_path: Path) -> None:
    from dltop.store import connect

    s = seed(tmp_path)
    db = connect(s.db_path, create=False)
    with db.conn:  # no run in progress (a running run's log grows outside the database)
        db.execute("update runs set status = 'ok' where status = 'running'")
    db.close()
    app = make_app(s, gpus=0)
    async with app.run_test(size=(100, 30)):
        changed, view, _ = app._read_campaign(force=False)
        assert changed and view is not None and view.current is None
        app.campaign_view = view
        assert app._read_campaign(force=False)[0] is False
        assert app._read_campaign(force=True)[0] is True


def test_an_engine_that_starts_or_dies_is_seen_without_a_database_change(
        tmp_path: Path) -> None:
    from dltop.live.campaign import read_campaign
    from dltop.store import connect

    s = seed(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        db = connect(s.db_path, create=False)
        view = read_campaign(db, s.campaign_id)
        assert view is not None and not view.engine_alive
        assert not engine_changed(view)
        # the engine's pid and start time, as an engine records them
        alive = replace(view, engine_pid=proc.pid,
                        engine_start_time=process_start_time(proc.pid))
        assert engine_changed(alive)  # recorded, not yet seen alive
        assert not engine_changed(replace(alive, engine_alive=True))
        proc.kill()
        proc.wait()
        assert engine_changed(replace(alive, engine_alive=True))  # it died
    finally:
        proc.kill()
        proc.wait()


async def test_a_key_wakes_the_idle_database_poll(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=0)
    async with app.run_test(size=(100, 30)) as pilot:
        app._poll_wake.clear()
        await pilot.press("down")
        assert app._poll_wake.is_set()


@pytest.mark.parametrize("mode", ["results", "history"])
async def test_other_screens_run_no_timer_either(tmp_path: Path, mode: str) -> None:
    app = make_app(seed(tmp_path), gpus=0)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.refresh_now()
        await pilot.press({"results": "2", "history": "3"}[mode])
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert _running_timers(app) == []
