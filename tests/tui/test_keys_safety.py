"""Keys and safety: confirmations that name what they act on, pause that waits for the run,
following the newest campaign, htop habits (j/k, F1, F10), dltop's command palette, and
queue numbers without gaps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandPalette

from dltop.jobs import campaign
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.tui.modals import ConfirmDialog, HelpScreen, QuitDialog
from dltop.tui.palette import DltopCommands, commands
from dltop.tui.queue import QueueTable
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.screens import HistoryScreen, MainScreen, TitleBar

from .conftest import PROFILE, Seeded, seed
from .test_keys import app_for, job, press, rows, select_job, settle, started


@pytest.fixture
def engine_seeded(tmp_path: Path, stand_in_engine: int) -> Seeded:
    return seed(tmp_path, engine_pid=stand_in_engine)


def title(app: Any) -> str:
    return str(app.screen.query_one(TitleBar).render())


def sql(seeded: Seeded, statement: str, *params: object) -> None:
    db = connect(seeded.db_path, create=False)
    with db.conn:
        db.execute(statement, list(params))
    db.close()


# c: cancel the run shown, after a confirmation naming it ------------------------------------
async def test_c_asks_naming_the_run_and_no_leaves_it(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        await pilot.press("c")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmDialog)
        what = str(dialog.query_one("#confirm-what").render())
        # run id, framework, model, batch and device
        assert f"run {engine_seeded.run_id}: torch alexnet-r b64 cpu:1 #1" in what
        await press(app, pilot, "n")
        assert isinstance(app.screen, MainScreen)
    assert rows(engine_seeded, "select cancel_run_id from campaigns")[0]["cancel_run_id"] is None
    assert app.done == []


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_c_never_cancels_a_run_that_started_after_the_keypress(
        engine_seeded: Seeded) -> None:
    s = engine_seeded
    async with started(s) as (app, pilot):
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        # While the dialog is open, the run shown ends and the next job's run starts.
        store = Store(connect(s.db_path, create=False))
        store.finish_run(s.run_id, s.job_ids[2], "ok", {"n_iterations": 20})
        newer = store.start_run(s.job_ids[3], s.campaign_id, 1, "", 64)
        await press(app, pilot, "y")
        assert app.campaign_view is not None and app.campaign_view.current is not None
        assert app.campaign_view.current.run_id == newer
    assert rows(s, "select cancel_run_id from campaigns")[0]["cancel_run_id"] is None
    assert [(d.action, d.text) for d in app.done] == [
        ("cancel-run", f"run {s.run_id} had already ended: nothing cancelled")]


# x: remove the job, after a confirmation naming it ------------------------------------------
@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_x_asks_naming_the_job_and_no_keeps_it(engine_seeded: Seeded) -> None:
    ids = engine_seeded.job_ids
    async with started(engine_seeded) as (app, pilot):
        await select_job(app, pilot, ids[4])
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        what = str(app.screen.query_one("#confirm-what").render())
        assert "job #5: torch resnet-56 b64 cpu:1, repeat 1" in what
        await press(app, pilot, "escape")
        assert job(engine_seeded, ids[4])["status"] == "queued"
        await pilot.press("x")
        await pilot.pause()
        await press(app, pilot, "y")
    assert job(engine_seeded, ids[4])["status"] == "removed"
    assert [d.action for d in app.done] == ["remove"]


async def test_queue_numbers_have_no_gap_after_a_removal(engine_seeded: Seeded) -> None:
    ids = engine_seeded.job_ids
    async with started(engine_seeded) as (app, pilot):
        await select_job(app, pilot, ids[3])
        await press(app, pilot, "x", "y")
        table = app.screen.query_one(QueueTable)
        shown = [table.cells_at(r) for r in range(table.row_count)]
        assert [c[0] for c in shown if c] == ["1", "2", "3", "4", "5"]
        # the job after the removed one (alexnet-r on cpu:2) moved up to #4
        assert [(c[3], c[5]) for c in shown if c][3] == ("resnet-56", "cpu:1")
    # The store keeps positions as they were (they only order the queue).
    assert [r["position"] for r in rows(engine_seeded, "select position from jobs "
                                        "where status != 'removed' order by position")] == \
        [0, 1, 2, 4, 5]


# p: "pausing after run N" until the run ends, then "paused" --------------------------------
async def test_pause_says_pausing_after_the_run_until_the_campaign_is_paused(
        engine_seeded: Seeded) -> None:
    s = engine_seeded
    async with started(s) as (app, pilot):
        await press(app, pilot, "p")
        assert rows(s, "select control from campaigns")[0]["control"] == "pause"
        assert f"running (pausing after run {s.run_id})" in title(app)
        # the engine marks the campaign paused once the run has ended
        sql(s, "update runs set status = 'ok' where id = ?", s.run_id)
        sql(s, "update campaigns set status = 'paused'")
        await settle(app, pilot)
        assert "paused" in title(app) and "pausing" not in title(app)
        await press(app, pilot, "p")
    assert rows(s, "select control from campaigns")[0]["control"] == "resume"


# f: follow the newest campaign ---------------------------------------------------------------
def second_campaign(seeded: Seeded) -> int:
    store = Store(connect(seeded.db_path, create=False))
    plan = campaign.preflight([parse(PROFILE, "tui-test.toml", "tui-test")], 0, False)
    cid, _ = campaign.create(store, plan, ["dltop", "run", "tui-test.toml"])
    return cid


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_title_says_a_newer_campaign_runs_and_f_follows_it(engine_seeded: Seeded) -> None:
    s = engine_seeded
    async with started(s) as (app, pilot):
        newer = second_campaign(s)
        await settle(app, pilot)
        assert app.campaign_view is not None and app.campaign_view.campaign.id == newer
        assert "f follows" not in title(app)  # following: the newest is shown
        app.open_campaign(s.campaign_id)  # History's Enter on the older one
        await settle(app, pilot)
        assert isinstance(app.screen, ResultsScreen)
        assert app.campaign_view.campaign.id == s.campaign_id
        assert f"campaign {newer} queued: f follows" in title(app)
        await press(app, pilot, "f")
        assert app.followed is None
        assert app.campaign_view is not None and app.campaign_view.campaign.id == newer
        assert "f follows" not in title(app)


# htop habits -------------------------------------------------------------------------------
@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_j_and_k_move_like_the_arrows(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        table = app.screen.query_one(QueueTable)
        table.move_cursor(0)
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert table.cursor_row == 3
        await pilot.press("k")
        await pilot.pause()
        assert table.cursor_row == 2
        await pilot.press("down", "up", "up")
        await pilot.pause()
        assert table.cursor_row == 1
        await pilot.press("J")  # J still moves the job (queued jobs only: here refused)
        await settle(app, pilot)
        assert table.cursor_row == 1 and app.done[-1].action == "move"
        second_campaign(engine_seeded)
        await press(app, pilot, "3")
        assert isinstance(app.screen, HistoryScreen)
        history = app.screen.query_one("#history")
        assert history.row_count == 2  # type: ignore[attr-defined]
        await pilot.press("j")
        await pilot.pause()
        assert history.cursor_row == 1  # type: ignore[attr-defined]
        await pilot.press("k")
        await pilot.pause()
        assert history.cursor_row == 0  # type: ignore[attr-defined]


async def test_f1_opens_help_and_f10_quits(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        await pilot.press("f1")
        await pilot.pause()
        await pilot.press("f10")  # from the help too; an active campaign: it asks, as q does
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("l")
        await pilot.pause()
    assert app.return_value == "leave"


# the command palette -------------------------------------------------------------------------
@pytest.mark.slow
async def test_the_palette_offers_dltops_commands(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        assert {DltopCommands} == app.COMMANDS  # not Textual's theme/screenshot commands
        names = [name for name, _, _ in commands(app)]
        for expected in ("Add a profile", "Pause the queue", "Cancel the current run",
                         "Retry failed jobs", "Export results", "Results screen",
                         "Follow the newest campaign", "Quit"):
            assert expected in names
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"pause")
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)
        await press(app, pilot, "enter")
        assert isinstance(app.screen, MainScreen)
        assert rows(engine_seeded, "select control from campaigns")[0]["control"] == "pause"
        assert [name for name, _, _ in commands(app)][1] == "Resume the queue"
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"history")
        await pilot.pause(0.3)
        await press(app, pilot, "enter")
        assert isinstance(app.screen, HistoryScreen)


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_the_palette_works_with_no_campaign(tmp_path: Path) -> None:
    seeded = Seeded(tmp_path / "none.db", 0, [], 0)
    app = app_for(seeded)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"cancel")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert [n.message for n in app._notifications][-1] == \
            "no campaign yet: press a to add a profile"
    assert not seeded.db_path.exists()
