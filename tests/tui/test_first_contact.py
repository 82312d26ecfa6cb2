"""First contact: `dltop --fake-gpus 8` on a fresh machine opens the viewer on the
devices and an empty queue, and creates the database only when a campaign is added."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from dltop.cli import main
from dltop.cli.parser import build_parser
from dltop.telemetry.fake import FakeGpuBackend
from dltop.tui.app import DltopApp
from dltop.tui.devices import DeviceLines
from dltop.tui.messages import ActionDone
from dltop.tui.modals import ProfilePicker
from dltop.tui.queue import QueueTable
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.results_widgets import MetricBar
from dltop.tui.screens import HistoryScreen, MainScreen, QueueHint, TitleBar

from .conftest import SteppingClock, fixed_host


# the command line -----------------------------------------------------------------------
@pytest.mark.parametrize("argv,expected", [
    (["--fake-gpus", "8"], {"command": None, "fake_gpus": 8}),
    (["--db", "x.db", "--fake-gpus", "2", "--campaign", "3", "--no-resume"],
     {"command": None, "db": "x.db", "fake_gpus": 2, "campaign": 3, "no_resume": True}),
    (["--db", "x.db", "tui", "--refresh-hz", "2"],
     {"command": "tui", "db": "x.db", "refresh_hz": 2.0}),
    # after tui its own --db wins, as a list: tui --read-only takes several (a study)
    (["--db", "x.db", "tui", "--db", "y.db"], {"command": "tui", "db": ["y.db"]}),
    (["--db", "x.db", "runs"], {"command": "runs", "db": "x.db"}),
    (["--fake-gpus", "2", "devices"], {"command": "devices", "fake_gpus": 2}),
])
def test_viewer_options_before_any_command(argv: list[str], expected: dict[str, Any]) -> None:
    args = vars(build_parser().parse_args(argv))
    assert {k: args.get(k) for k in expected} == expected
    assert not any(k.startswith("global_") for k in args)


def test_a_viewer_option_before_another_command_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--refresh-hz", "2", "runs"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--refresh-hz before 'runs'" in err and "Traceback" not in err


# the viewer over no database --------------------------------------------------------------
class Recording(DltopApp):
    done: list[ActionDone]

    def on_action_done(self, msg: ActionDone) -> None:
        self.done.append(msg)


def fresh_app(db_path: Path) -> Recording:
    app = Recording(db_path, db_path.parent / "runs", FakeGpuBackend(8, clock_ns=SteppingClock()),
                    host=fixed_host, live=False, resume_orphans=True)
    app.done = []
    return app


async def test_no_database_opens_on_the_devices_and_creates_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "data" / "dltop.db"
    app = fresh_app(db_path)
    async with app.run_test(size=(100, 32)) as pilot:
        await app.workers.wait_for_complete()
        await app.refresh_now()
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert len(app.screen.query_one(DeviceLines).gpus) == 8
        hint = app.screen.query_one(QueueHint)
        assert hint.display
        assert "Press a to add a profile" in str(hint.render())
        assert f"{db_path} is created then" in str(hint.render())
        assert app.screen.query_one(QueueTable).row_count == 0
        assert "no campaign yet" in str(app.screen.query_one(TitleBar).render())
        for key in ("c", "p", "r", "3"):  # nothing to act on: warnings, no error, no file
            await pilot.press(key)
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("2")  # no campaign: no metric to offer (all 35 were listed)
        await pilot.pause()
        assert isinstance(app.screen, ResultsScreen)
        assert str(app.screen.query_one(MetricBar).render()).strip() == ""
        assert "no campaign yet" in str(app.screen.query_one("#results-title").render())
        errors = [n for n in app._notifications if n.severity == "error"]
        assert errors == []
        assert app.done == []  # no orphan to resume, no edit
    assert not db_path.exists() and not db_path.parent.exists()


async def test_adding_where_no_database_can_be_created_says_why_in_the_dialog(
        tmp_path: Path, profile_text: Any) -> None:
    (tmp_path / "a-file").write_text("")
    db_path = tmp_path / "a-file" / "sub" / "dltop.db"  # its directory cannot be made
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({"frameworks": ["torch"], "models": ["fcn-r"],
                                  "batch_sizes": [8], "devices": ["cpu:1"]}))
    app = fresh_app(db_path)
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, ProfilePicker)
        picker.query_one("#profile-path").value = str(prof)  # type: ignore[attr-defined]
        picker.query_one("#profile-path").focus()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen is picker  # still open: nothing was queued
        error = str(picker.query_one("#profile-error", Static).render())
        assert "cannot create the database directory" in error and str(db_path) in error
    assert app.done == []
    assert not (tmp_path / "a-file" / "sub").exists()


def test_first_contact_snapshot_80x24(snap_compare: Any) -> None:
    # A relative path that is not there: the same text on every machine.
    app = DltopApp(Path("no-such-dir/dltop.db"), Path("no-such-dir/dltop-runs"),
                   FakeGpuBackend(8, clock_ns=SteppingClock()), host=fixed_host, live=False,
                   resume_orphans=False)

    async def ticks(pilot: Any) -> None:
        for _ in range(12):
            await app.refresh_now()
            await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=ticks)
    assert not Path("no-such-dir").exists()


# the real terminal --------------------------------------------------------------------
@pytest.fixture
def tmux() -> Iterator[list[str]]:
    """A private tmux server (its own socket), killed afterwards."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is required for the terminal tests (Debian package tmux)")
    base = ["tmux", "-L", f"dltop-test-{uuid.uuid4().hex[:8]}"]
    try:
        yield base
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True)


def capture(tmux: list[str]) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", "v"], capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.slow
def test_dltop_fake_gpus_on_a_fresh_machine_in_tmux(tmp_path: Path, tmux: list[str],
                                                    wait_until: Any) -> None:
    xdg = tmp_path / "xdg"
    env = {"XDG_DATA_HOME": str(xdg / "data"), "XDG_CONFIG_HOME": str(xdg / "config"),
           "XDG_STATE_HOME": str(xdg / "state"), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "TERM": "xterm-256color", "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    status = tmp_path / "status"
    shell = " ".join(f"{k}={v!r}" for k, v in env.items())
    cmd = f"env -i {shell} {sys.executable} -m dltop --fake-gpus 8; echo $? > {status}"
    subprocess.run([*tmux, "new-session", "-d", "-s", "v", "-x", "120", "-y", "40", cmd],
                   check=True)

    def gpu_rows() -> list[str]:
        return [line for line in capture(tmux).splitlines() if re.search(r"\bSIM\b", line)]

    wait_until(lambda: len(gpu_rows()) == 8, 60, "8 simulated GPUs drawn", interval_s=0.2)
    screen = capture(tmux)
    assert "Press a to add a profile" in screen
    first = gpu_rows()
    wait_until(lambda: gpu_rows() != first, 20, "the GPU rows to update", interval_s=0.2)
    subprocess.run([*tmux, "send-keys", "-t", "v", "q"], check=True)
    wait_until(status.exists, 30, "the viewer to quit")
    time.sleep(0.1)  # the write of the status file may still be going on
    assert status.read_text().strip() == "0"
    assert not (xdg / "data" / "dltop").exists()  # no database, no directory
