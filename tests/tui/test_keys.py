"""Every key binding, driven with pilot, asserting the database and the posted messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dltop.store import connect
from dltop.tui.app import DltopApp
from dltop.tui.devices import DeviceLines
from dltop.tui.keybar import KeyBar
from dltop.tui.messages import ActionDone
from dltop.tui.modals import HelpScreen, ProfilePicker, QuitDialog
from dltop.tui.queue import PROGRESS, QueueTable
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.screens import HistoryScreen, MainScreen

from .conftest import Seeded, make_app, seed


class Recording(DltopApp):
    """The app, recording the ActionDone messages its workers post."""

    done: list[ActionDone]

    def on_action_done(self, msg: ActionDone) -> None:
        # Textual also calls DltopApp's handler (it dispatches along the MRO).
        self.done.append(msg)


def app_for(seeded: Seeded, **kw: Any) -> Recording:
    base = make_app(seeded, **kw)
    app = Recording(base.db_path, base.logs_dir, base.backend, host=base._poller._host
                    if base._poller else None, live=False, resume_orphans=False)
    app.done = []
    return app


async def settle(app: DltopApp, pilot: Pilot[Any]) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    await app.refresh_now()
    await pilot.pause()


@asynccontextmanager
async def started(seeded: Seeded, size: tuple[int, int] = (100, 30)
                  ) -> AsyncIterator[tuple[Recording, Pilot[Any]]]:
    """The app for ``seeded``, running and settled; the app is also there after the block."""
    app = app_for(seeded)
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        yield app, pilot


async def press(app: DltopApp, pilot: Pilot[Any], *keys: str) -> None:
    """Press ``keys``, then wait for what they started."""
    await pilot.press(*keys)
    await settle(app, pilot)


def one_cpu_job(model: str) -> dict[str, object]:
    """A profile's ``[[matrix]]`` table: ``model`` in PyTorch at batch 8 on one CPU."""
    return {"frameworks": ["torch"], "models": [model], "batch_sizes": [8], "devices": ["cpu:1"]}


async def add_profile(pilot: Pilot[Any], path: Path) -> None:
    """``a``, then ``path`` typed into the profile picker and entered."""
    await pilot.press("a")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, ProfilePicker)
    screen.query_one("#profile-path").value = str(path)  # type: ignore[attr-defined]
    screen.query_one("#profile-path").focus()
    await pilot.press("enter")


def rows(seeded: Seeded, sql: str, *params: Any) -> list[dict[str, Any]]:
    return list(connect(seeded.db_path, create=False).query(sql, list(params)))


def job(seeded: Seeded, job_id: int) -> dict[str, Any]:
    return rows(seeded, "select * from jobs where id = ?", job_id)[0]


async def select_job(app: DltopApp, pilot: Pilot[Any], job_id: int) -> None:
    table = app.screen.query_one(QueueTable)
    table.select(job_id)
    await pilot.pause()
    assert table.selected_job == job_id


@pytest.fixture
def engine_seeded(tmp_path: Path, stand_in_engine: int) -> Seeded:
    return seed(tmp_path, engine_pid=stand_in_engine)


async def test_main_screen_shows_queue_run_and_devices(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, _):
        assert isinstance(app.screen, MainScreen)
        view = app.campaign_view
        assert view is not None and view.engine_alive and view.current is not None
        assert view.current.done == 12 and view.current.total == 25
        assert view.current.log_tail[-1] == "log line 49"
        assert app.screen.query_one(QueueTable).row_count == 6
        assert len(app.screen.query_one(DeviceLines).gpus) == 8


async def test_the_gpu_note_says_why_and_is_laid_out_only_when_it_changes(
        engine_seeded: Seeded) -> None:
    from dataclasses import replace

    from textual.widgets import Static

    from dltop.live.devices import DeviceFrame
    from dltop.tui.devices import DevicesPanel

    async with started(engine_seeded) as (app, pilot):
        panel = app.screen.query_one(DevicesPanel)
        note = panel.query_one("#gpu-note", Static)
        assert note.display and "SIMULATED GPUs" in str(note.render())
        frame = app.device_frame
        assert frame is not None
        updates: list[object] = []
        real_update = note.update
        note.update = lambda *a, **k: (updates.append(a), real_update(*a, **k))[1]  # type: ignore[method-assign]
        panel.show(frame)
        panel.show(frame)
        assert updates == []  # unchanged: no update, so no layout of the whole screen
        panel.show(DeviceFrame((), (), frame.host, "NVML not found"))
        await pilot.pause()
        assert note.display and str(note.render()) == "no GPU: NVML not found"
        real = tuple(replace(st, simulated=False) for st in frame.statics)
        panel.show(replace(frame, statics=real))
        await pilot.pause()
        assert not note.display and len(updates) == 2


async def test_c_cancels_the_current_run(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        await press(app, pilot, "c", "y")  # confirmed (tests/tui/test_keys_safety.py)
    assert rows(engine_seeded, "select cancel_run_id from campaigns")[0]["cancel_run_id"] == \
        engine_seeded.run_id
    assert [d.action for d in app.done] == ["cancel-run"]


async def test_p_pauses_then_resumes(engine_seeded: Seeded) -> None:
    """The key bar says what ``p`` will do: Resume while paused (it said Pause)."""
    def bar() -> str:
        return str(app.screen.query_one(KeyBar).render())

    async with started(engine_seeded) as (app, pilot):
        assert " p Pause " in bar()
        await press(app, pilot, "p")
        assert rows(engine_seeded, "select control from campaigns")[0]["control"] == "pause"
        assert " p Resume " in bar() and "Pause" not in bar()
        await press(app, pilot, "p")
        assert " p Pause " in bar()
    assert rows(engine_seeded, "select control from campaigns")[0]["control"] == "resume"
    assert [d.action for d in app.done] == ["pause", "resume"]


async def test_r_requeues_failed_jobs_at_the_end(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        await press(app, pilot, "r")
    crashed = job(engine_seeded, engine_seeded.job_ids[1])
    assert crashed["status"] == "queued" and crashed["position"] == 6
    assert "1 job(s) queued again" in app.done[-1].text


async def test_shift_k_and_j_move_the_selected_queued_job(engine_seeded: Seeded) -> None:
    ids = engine_seeded.job_ids
    async with started(engine_seeded) as (app, pilot):
        await select_job(app, pilot, ids[4])
        await press(app, pilot, "K")
        assert job(engine_seeded, ids[4])["position"] < job(engine_seeded, ids[3])["position"]
        assert app.screen.query_one(QueueTable).selected_job == ids[4]  # cursor follows
        await pilot.press("K")  # cannot pass the running job
        await settle(app, pilot)
        assert job(engine_seeded, ids[4])["position"] == 3
        await press(app, pilot, "J", "J")
    assert job(engine_seeded, ids[4])["position"] == 5
    assert app.done[1].text.startswith("only queued jobs move")
    # A move that happened says nothing: the queue shows it, and a pile of toasts
    # would be re-mounted on every screen switch.
    assert [d.text for d in app.done[2:]] == ["", ""] and app.done[0].text == ""


@pytest.mark.slow
async def test_x_removes_a_queued_job_but_not_a_finished_one(engine_seeded: Seeded) -> None:
    ids = engine_seeded.job_ids
    async with started(engine_seeded) as (app, pilot):
        await select_job(app, pilot, ids[5])
        await press(app, pilot, "x", "y")  # confirmed (tests/tui/test_keys_safety.py)
        assert job(engine_seeded, ids[5])["status"] == "removed"
        assert app.screen.query_one(QueueTable).row_count == 5
        await select_job(app, pilot, ids[0])
        await press(app, pilot, "x")
        assert isinstance(app.screen, MainScreen)  # nothing to confirm: it cannot go
    assert job(engine_seeded, ids[0])["status"] == "ok"
    assert [d.action for d in app.done] == ["remove"]


async def test_a_with_a_bad_profile_shows_the_error_and_queues_nothing(
        engine_seeded: Seeded, tmp_path: Path, profile_text: Any) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(profile_text(one_cpu_job("fcn-r"), defaults={"iterations": "many"}))
    async with started(engine_seeded) as (app, pilot):
        await add_profile(pilot, bad)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ProfilePicker)
        error = str(app.screen.query_one("#profile-error").render())
        assert "bad.toml" in error and "iterations" in error
        await pilot.press("escape")
    assert len(rows(engine_seeded, "select id from jobs")) == 6
    assert app.done == []


async def test_a_appends_a_valid_profile_to_the_running_campaign(
        engine_seeded: Seeded, tmp_path: Path, profile_text: Any) -> None:
    good = tmp_path / "more.toml"
    good.write_text(profile_text(one_cpu_job("lstm")))
    async with started(engine_seeded) as (app, pilot):
        await add_profile(pilot, good)
        await settle(app, pilot)
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
    added = rows(engine_seeded, "select * from jobs where model = 'lstm'")
    assert len(added) == 1 and added[0]["status"] == "queued" and added[0]["position"] == 6
    assert app.done[-1].action == "add" and "added to campaign" in app.done[-1].text


async def test_e_exports_the_table_to_the_typed_path(engine_seeded: Seeded,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    async with started(engine_seeded) as (app, pilot):
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        app.screen.query_one("#export-path").value = str(out)  # type: ignore[attr-defined]
        await press(app, pilot, "enter")
    text = out.read_text()  # the caption as '# ' lines, then the header
    assert text.startswith("# Campaign") and "\nmodel,framework,batch," in text
    assert app.done[-1].text == f"wrote {out}"


@pytest.mark.slow
async def test_number_keys_switch_screens_and_results_update(engine_seeded: Seeded) -> None:
    async with started(engine_seeded) as (app, pilot):
        await press(app, pilot, "2")
        assert isinstance(app.screen, ResultsScreen)
        table = app.screen.query_one("#results-table")
        assert [c.plain for c in table.get_row_at(0)] == [  # type: ignore[attr-defined]
            "fcn-r", "torch", "64", "0.05000 n1", "failed"]
        await press(app, pilot, "m")
        assert "samples per second" in str(app.screen.query_one("#results-title").render())
        await press(app, pilot, "3")
        assert isinstance(app.screen, HistoryScreen)
        assert app.screen.query_one("#history").row_count == 1  # type: ignore[attr-defined]
        await press(app, pilot, "enter")
        assert isinstance(app.screen, ResultsScreen)
        assert app.followed == engine_seeded.campaign_id
        await pilot.press("1")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_switching_back_to_a_composed_screen_holds_no_repaint(
        engine_seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual's 50 ms repaint hold (App.delay_update) hides a screen being composed; every
    screen is composed at start-up, so no keypress waits for one (through a terminal the
    hold was most of a switch)."""
    from textual.app import App

    holds: list[float] = []
    real = App.delay_update
    monkeypatch.setattr(App, "delay_update",
                        lambda self, delay=0.05: (holds.append(delay), real(self, delay))[1])
    async with started(engine_seeded) as (app, pilot):
        assert len(holds) == 2  # results and history, composed before the first paint
        assert isinstance(app.screen, MainScreen)
        for key, screen in (("2", ResultsScreen), ("1", MainScreen), ("3", HistoryScreen),
                            ("2", ResultsScreen), ("1", MainScreen)):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, screen)
            assert app._batch_count == 0  # repaints held only until the screen resumed
        assert len(holds) == 2


async def test_screens_composed_at_start_up_compute_nothing_until_seen(
        engine_seeded: Seeded) -> None:
    """The results screen composed unseen computes no table (a 100 000-job campaign's
    takes seconds); its first visit does."""
    async with started(engine_seeded) as (app, pilot):
        await settle(app, pilot)
        results = app.get_screen_stack("results")[0]
        assert isinstance(results, ResultsScreen) and results.is_mounted
        assert results.data is None
        await pilot.press("2")
        await settle(app, pilot)
        assert results.data is not None and results.data.pivot.rows


async def test_question_mark_opens_help(engine_seeded: Seeded) -> None:
    app = app_for(engine_seeded)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


@pytest.mark.parametrize(("key", "result", "control"),
                         [("l", "leave", None), ("s", "stop", "cancel")])
async def test_q_with_an_active_campaign_asks(engine_seeded: Seeded, key: str, result: str,
                                             control: str | None) -> None:
    async with started(engine_seeded) as (app, pilot):
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        await pilot.press(key)
        await pilot.pause()
    assert app.return_value == result
    assert rows(engine_seeded, "select control from campaigns")[0]["control"] == control


async def test_q_without_an_engine_quits_at_once(tmp_path: Path) -> None:
    seeded = seed(tmp_path)  # no engine: nothing active
    async with started(seeded) as (app, pilot):
        assert app.campaign_view is not None and not app.campaign_view.active
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == "quit"


async def test_a_terminal_too_small_says_so(engine_seeded: Seeded) -> None:
    async with started(engine_seeded, size=(60, 20)) as (app, _):
        notice = app.screen.query_one("#too-small")
        assert notice.display and "needs at least 80x24 (now 60x20)" in str(notice.render())
        assert not app.screen.query_one("#body").display


async def test_the_key_bar_is_clickable(engine_seeded: Seeded) -> None:
    from dltop.tui.keybar import KeyBar

    async with started(engine_seeded, size=(140, 30)) as (app, pilot):
        bar = app.screen.query_one(KeyBar)
        start = next(s for s, _, action, _ in bar._spans if action == "switch_mode('results')")
        await pilot.click("#keys", offset=(start + 1, 0))
        await pilot.pause()
        assert isinstance(app.screen, ResultsScreen)


async def test_packed_campaign_shows_every_run_in_progress(engine_seeded: Seeded) -> None:
    from dltop.store import Store
    from dltop.tui.runpanel import RunHeadline

    store = Store(connect(engine_seeded.db_path, create=False))
    second = engine_seeded.job_ids[3]
    rid = store.start_run(second, engine_seeded.campaign_id, 1, "", 64)
    store.add_iterations(rid, [{"idx": i, "seconds": 0.2, "samples": 64, "warmup": 1,
                                "loss": 1.0} for i in range(3)])
    async with started(engine_seeded) as (app, _):
        view = app.campaign_view
        assert view is not None and view.current is not None
        assert view.current.run_id == rid  # the newest run is the panel's
        assert view.progress == {engine_seeded.job_ids[2]: (12, 25), second: (3, 25)}
        table = app.screen.query_one(QueueTable)
        progress = {job.job_id: cells[PROGRESS] for job, cells in zip(
            table._jobs, table._cells, strict=True)}
        assert progress[engine_seeded.job_ids[2]] == "12/25" and progress[second] == "3/25"
        headline = app.screen.query_one(RunHeadline)
        assert headline.others == 1 and "+1 more running" in str(headline.render())


@pytest.mark.parametrize("width", [80, 100, 160])
async def test_the_key_bar_keeps_help_and_quit_when_narrow(engine_seeded: Seeded,
                                                          width: int) -> None:
    from dltop.tui.keybar import KeyBar

    async with started(engine_seeded, size=(width, 30)) as (app, pilot):
        bar = app.screen.query_one(KeyBar)
        text = str(bar.render())
        assert len(text) <= width
        assert "? Help" in text and "q Quit" in text and " a Add" in text
        assert ("3 History" in text) == (width >= 120)  # the last keys give way first
        quit_start = next(s for s, _, action, _ in bar._spans if action == "quit_viewer")
        await pilot.click("#keys", offset=(quit_start + 1, 0))
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)  # the campaign is active: it asks
