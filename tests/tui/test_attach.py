"""Engine and viewer are separate processes: killing viewers never touches the runs."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.errors import UserError
from dltop.jobs.start import Launch, start_engine
from dltop.store import connect

from .conftest import Seeded, make_app

pytestmark = pytest.mark.slow

VIEWER = """
import sys
from pathlib import Path
from typing import Any
from dltop.telemetry.fake import FakeGpuBackend
from dltop.tui.app import DltopApp
db = Path(sys.argv[1])
DltopApp(db, db.parent / "logs", FakeGpuBackend(2)).run(headless=True)
"""


STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"


def start_campaign(tmp_path: Path, profile_text: Any, repeats: int,
                   iterations: int = 60) -> Launch:
    """A background engine on ``a.db`` running ``repeats`` runs of ``iterations``: a
    ``command`` program of 50 ms steps (the engine and viewers are under test; a PyTorch
    runner spent ~5 s of CPU starting, per run)."""
    profile = tmp_path / "attach.toml"
    profile.write_text(profile_text({"frameworks": ["command"], "models": ["stepper"],
                                     "batch_sizes": [32], "devices": ["cpu:1"],
                                     "repeats": repeats, "command": [
                                         sys.executable, str(STEPS), "{total}", "0.05", "32"]},
                                    name="attach",
                                    defaults={"iterations": iterations, "warmup": 2}))
    launch = start_engine([str(profile)], tmp_path / "a.db", tmp_path / "logs", wait_s=0.5)
    assert launch.exit_code is None, launch.log_tail
    return launch


def _one(db_path: Path, sql: str) -> object:
    row = next(iter(connect(db_path, create=False).query(sql)), None)
    return None if row is None else next(iter(row.values()))


def _ready(db_path: Path, sql: str) -> object:
    """``_one`` once the engine has created the schema: until then the file exists but
    is empty (created 0600 first, then migrated), which ``connect`` rightly refuses."""
    if not db_path.exists():
        return None
    try:
        return _one(db_path, sql)
    except UserError as exc:
        if "empty file" in str(exc):
            return None
        raise
    except sqlite3.OperationalError as exc:  # a migration still under way
        if "no such" in str(exc):
            return None
        raise


def _sighup_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})


def test_killed_viewers_leave_the_engine_and_its_runs_alone(tmp_path: Path, wait_until: Any,
                                                            profile_text: Any) -> None:
    db_path = tmp_path / "a.db"
    launch = start_campaign(tmp_path, profile_text, repeats=2)
    # A viewer as an SSH session starts it: SIGHUP at its default (a suite run under
    # nohup hands every child an ignored SIGHUP, and the hung-up viewer then stays).
    viewers = [subprocess.Popen([sys.executable, "-c", VIEWER, str(db_path)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, preexec_fn=_sighup_default)
               for _ in range(2)]
    try:
        wait_until(lambda: (_ready(
            db_path, "select count(*) from iterations i join runs r on r.id = i.run_id "
                     "where r.status = 'running'") or 0) > 5, 120, "a run in progress",
                   interval_s=0.2)
        assert all(v.poll() is None for v in viewers), "both viewers attach at once"
        viewers[0].send_signal(signal.SIGHUP)  # the SSH connection drops
        viewers[1].kill()  # and another viewer is killed outright
        for v in viewers:
            v.wait(timeout=20)
        os.kill(launch.pid, 0)  # the engine is still there
        wait_until(lambda: _one(db_path, "select status from campaigns") == "finished", 240,
                   "the campaign to finish", interval_s=0.2)
    finally:
        for v in viewers:
            if v.poll() is None:
                v.kill()
    runs = list(connect(db_path, create=False).query(
        "select status, n_iterations from runs order by id"))
    assert runs == [{"status": "ok", "n_iterations": 60}] * 2

    asyncio.run(_reattach(db_path))


async def _reattach(db_path: Path) -> None:
    """A new viewer sees the finished campaign and its stored results."""
    app = make_app(Seeded(db_path, 1, [], 0), gpus=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        view = app.campaign_view
        assert view is not None and view.campaign.status == "finished"
        assert view.counts == {"ok": 2} and view.current is None


def test_a_viewer_starting_on_an_orphaned_campaign_resumes_it(tmp_path: Path, wait_until: Any,
                                                             profile_text: Any) -> None:
    db_path = tmp_path / "a.db"
    # The runner may or may not outlive its engine: its next event finds the pipe closed
    # and ends it (tests/core/test_packing.py keeps one alive in a long step to show the
    # resume reaps it). Either way the viewer resumes the campaign and nothing is left.
    launch = start_campaign(tmp_path, profile_text, repeats=1, iterations=60)
    wait_until(lambda: (_ready(
        db_path, "select count(*) from iterations") or 0) > 3, 120, "a run in progress",
               interval_s=0.2)
    runner_pid = int(_one(db_path, "select pid from runs where status = 'running'"))  # type: ignore[arg-type]
    os.kill(launch.pid, signal.SIGKILL)  # the engine dies; its runner is orphaned
    wait_until(lambda: not psutil_alive(launch.pid), 10, "the engine to die")

    asyncio.run(_start_viewer(db_path))
    wait_until(lambda: _one(db_path, "select status from campaigns") == "finished", 240,
               "the resumed campaign to finish", interval_s=0.2)
    assert not psutil_alive(runner_pid), "the orphaned runner was reaped"
    runs = list(connect(db_path, create=False).query(
        "select status, error_kind from runs order by id"))
    assert runs == [{"status": "crashed", "error_kind": "engine_lost"},
                    {"status": "ok", "error_kind": None}]


def psutil_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _start_viewer(db_path: Path) -> None:
    from dltop.tui.app import DltopApp

    app = DltopApp(db_path, db_path.parent / "logs", None, live=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
