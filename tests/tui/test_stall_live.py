"""The stall detector on a real runner that hangs (``inject = "hang"``: after its first
iteration the torch runner sleeps forever)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dltop.errors import UserError
from dltop.jobs.start import start_engine
from dltop.store import connect
from dltop.tui.runpanel import RunHealth

from .conftest import Seeded, make_app

pytestmark = pytest.mark.slow


def _iterations(db_path: Path) -> int:
    try:
        row = next(iter(connect(db_path, create=False).query(
            "select count(*) as n from iterations")), None)
    except UserError:  # not there yet, or the engine is creating it (an empty file)
        return 0
    return int(row["n"]) if row else 0


async def test_a_hung_run_is_marked_stalled(tmp_path: Path, wait_until: Any,
                                            profile_text: Any) -> None:
    profile = tmp_path / "hang.toml"
    profile.write_text(profile_text(
        {"frameworks": ["torch"], "models": ["fcn-r"], "batch_sizes": [8],
         "devices": ["cpu:1"]}, name="hang",
        defaults={"iterations": 50, "warmup": 2, "inject": "hang", "timeout_s": 300}))
    db_path = tmp_path / "h.db"
    launch = start_engine([str(profile)], db_path, tmp_path / "logs", wait_s=0.5)
    assert launch.exit_code is None, launch.log_tail
    try:
        wait_until(lambda: _iterations(db_path) >= 1, 180, "the run's first iteration",
                   interval_s=0.2)
        app = make_app(Seeded(db_path, 1, [], 0), gpus=0)
        async with app.run_test(size=(100, 30)) as pilot:
            seen: list[tuple[float, float, str]] = []  # (quiet s, bound s, what it says)
            end = time.monotonic() + 120  # a generous ceiling for a loaded host
            while time.monotonic() < end:
                await app.refresh_now()
                await pilot.pause()
                health = app.screen.query_one(RunHealth)
                st = health.run.stall if health.run is not None else None
                if st is not None:
                    seen.append((st.quiet_s, st.bound_s, health.render().plain))
                    if "stalled: no iteration for" in seen[-1][2]:
                        break
                await asyncio.sleep(0.2)
            assert seen and "stalled: no iteration for" in seen[-1][2], seen[-3:]
            run = app.screen.query_one(RunHealth).run
            assert run is not None and run.done == 1  # it hung after its first iteration
            st = run.stall
            assert st is not None and st.stalled and not st.first
            # held to max(5 s, 10 x its one step), and not said before that
            assert st.bound_s >= 5.0 and st.quiet_s > st.bound_s
            assert all("stalled" not in text for quiet, bound, text in seen if quiet < bound)
    finally:
        os.kill(launch.pid, signal.SIGTERM)  # cancels the hung run like Ctrl-C
        wait_until(lambda: _engine_gone(launch.pid), 60, "the engine to stop")


def _engine_gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
