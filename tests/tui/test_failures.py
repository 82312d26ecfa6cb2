"""A failing worker is never silent: it notifies, and a polling loop comes back."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import GpuSample
from dltop.tui import app as app_module
from dltop.tui import ops
from dltop.tui.app import DltopApp

from .conftest import SteppingClock, fixed_host, seed


class Noting(DltopApp):
    """The app, recording the notifications it shows."""

    notes: list[tuple[str, str]]

    def notify(self, message: str, **kw: Any) -> None:  # type: ignore[override]
        self.notes.append((message, kw.get("severity", "information")))
        super().notify(message, **kw)


class FlakyGpus(FakeGpuBackend):
    """FAKE hardware: simulated GPUs whose first reading raises."""

    def __init__(self) -> None:
        super().__init__(2, clock_ns=SteppingClock())
        self.failed = False

    def sample(self, index: int, slow: bool) -> GpuSample:
        if not self.failed:
            self.failed = True
            raise RuntimeError("GPU is lost")
        return super().sample(index, slow)


def raising_once(fn: Callable[..., Any], exc: Exception) -> Callable[..., Any]:
    calls = []

    def wrapper(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return fn(*args, **kw)

    return wrapper


async def wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_failed_polling_loops_notify_and_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = seed(tmp_path)
    # The database read fails once, as it does while another process holds a write lock.
    monkeypatch.setattr(app_module, "read_campaign", raising_once(
        app_module.read_campaign, sqlite3.OperationalError("database is locked")))
    app = Noting(s.db_path, tmp_path / "logs", FlakyGpus(), host=fixed_host, db_hz=50,
                 device_hz=50, resume_orphans=False)
    app.notes = []
    app.poll_retry_s = 0.05
    async with app.run_test() as pilot:
        await wait_until(lambda: app.campaign_view is not None and app.device_frame is not None)
        await pilot.pause()
        errors = [text for text, severity in app.notes if severity == "error"]
        assert any("reading the database failed" in t and "database is locked" in t
                   for t in errors), app.notes
        assert any("reading the devices failed" in t and "GPU is lost" in t
                   for t in errors), app.notes
        assert app.campaign_view is not None
        assert app.campaign_view.campaign.id == s.campaign_id  # the loop read again
        assert len(errors) == 2  # one notification per failure, no spin


async def test_a_failing_edit_shows_its_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = seed(tmp_path)

    def locked(db_path: Path, job_id: int, delta: int) -> str:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(ops, "move", locked)
    app = Noting(s.db_path, tmp_path / "logs", None, live=False, resume_orphans=False)
    app.notes = []
    async with app.run_test() as pilot:
        app.action_move_job(s.job_ids[3], 1)
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert ("move failed: OperationalError: database is locked", "error") in app.notes


async def test_a_read_that_always_fails_backs_off_and_notifies_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = seed(tmp_path)
    reads: list[float] = []

    def broken(*args: Any) -> Any:
        reads.append(time.monotonic())
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(app_module, "read_campaign", broken)
    app = Noting(s.db_path, tmp_path / "logs", None, db_hz=50, resume_orphans=False)
    app.notes = []
    app.poll_retry_s = 0.05
    async with app.run_test() as pilot:
        await wait_until(lambda: len(reads) >= 4)  # restarted after 0.05, 0.1, 0.2 s
        await pilot.pause()
        assert app._poll_failures["db-poll"] in (4, 5)
    # 50 reads a second without the back-off; with it, 0.35 s bought 4 reads.
    assert len([n for n in app.notes if n[1] == "error"]) == 1
