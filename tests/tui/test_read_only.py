"""``dltop tui --read-only`` (what ``dltop serve`` runs unless ``--control``): every steering
key, click and palette command is refused by the action itself, and nothing changes in the
database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dltop.tui.actions import STEERING, steering
from dltop.tui.keybar import KeyBar
from dltop.tui.palette import commands
from dltop.tui.screens import MainScreen, TitleBar

from .conftest import Seeded, seed
from .test_keys import Recording, rows, select_job, settle


@pytest.fixture
def engine_seeded(tmp_path: Path, stand_in_engine: int) -> Seeded:
    return seed(tmp_path, engine_pid=stand_in_engine)


def state(s: Seeded) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    return (rows(s, "select * from campaigns order by id"),
            rows(s, "select * from jobs order by id"), rows(s, "select * from runs order by id"))


def viewer(s: Seeded, read_only: bool) -> Recording:
    app = Recording(s.db_path, s.db_path.parent / "logs", None, live=False,
                    resume_orphans=True, read_only=read_only)
    app.done = []
    return app


def test_steering_names_the_bindings_that_change_things() -> None:
    assert steering("app.add_profile") and steering("move(-1)") and steering("remove")
    assert steering("app.export") and steering("export_selected")
    assert not steering("switch_mode('main')") and not steering("open_run")
    assert not steering("quit_viewer") and not steering("help") and "follow_newest" not in STEERING


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_a_read_only_viewer_refuses_every_steering_action(engine_seeded: Seeded) -> None:
    s = engine_seeded
    before = state(s)
    app = viewer(s, read_only=True)
    assert not app.resume_orphans  # a read-only viewer starts no engine either
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        assert "read-only" in str(app.screen.query_one(TitleBar).render())
        keys = str(app.screen.query_one(KeyBar).render())
        assert "Add" not in keys and "Pause" not in keys and "Remove" not in keys, keys
        assert "Results" in keys and "Quit" in keys
        await select_job(app, pilot, s.job_ids[4])  # a queued job: x and J would act on it
        for key in ("a", "c", "p", "r", "J", "K", "x", "e", "2", "e", "1"):
            await pilot.press(key)
            await settle(app, pilot)
            assert not app.screen.is_modal, f"{key} opened {app.screen}"
        names = [name for name, _help, _fn in commands(app)]
        assert names and not {"Add a profile", "Pause the queue", "Cancel the current run",
                              "Retry failed jobs", "Export results"} & set(names), names
        # Called as the palette or a click would: refused in the action itself.
        app.action_toggle_pause()
        app.action_retry_failed()
        app.action_move_job(s.job_ids[4], -1)
        app.action_remove_job(s.job_ids[4])
        app.action_cancel_run()
        app.action_add_profile()
        app.action_export(s.campaign_id)
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("q")  # quits at once: no "stop the engine?" dialog
        await pilot.pause()
    assert app.return_value == "quit"
    assert app.done == []  # no worker ran an action
    assert state(s) == before


async def test_the_same_keys_steer_without_read_only(engine_seeded: Seeded) -> None:
    """The control case: the test above would see a change if the lock let one through."""
    s = engine_seeded
    before = state(s)
    app = viewer(s, read_only=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        assert "read-only" not in str(app.screen.query_one(TitleBar).render())
        await pilot.press("p")
        await settle(app, pilot)
    assert [d.action for d in app.done] == ["pause"]
    assert state(s)[0] != before[0]
