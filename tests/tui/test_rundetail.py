"""The run detail screen and its log viewer, driven by keys on a seeded database."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs import campaign
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.store.generations import pack_seconds
from dltop.tui.app import DltopApp
from dltop.tui.logview import LogLines, LogViewer
from dltop.tui.queue import QueueTable
from dltop.tui.rundetail import RunDetailScreen
from dltop.tui.screens import MainScreen

from .conftest import Seeded, make_app
from .detail_data import DetailSeed, seed_detail, write_big_log


@pytest.fixture
def data(tmp_path: Path) -> DetailSeed:
    return seed_detail(tmp_path)


def text_of(screen: Any, selector: str) -> str:
    return str(screen.query_one(selector).render())


async def open_row(pilot: Any, app: DltopApp, row: int,
                   wait: Callable[..., Any]) -> RunDetailScreen:
    await app.refresh_now()
    await pilot.pause()
    table = app.screen.query_one(QueueTable)
    await wait(lambda: table.row_count == 6, 10, "the queue")
    table.move_cursor(row)
    await pilot.press("enter")
    await wait(lambda: isinstance(app.screen, RunDetailScreen), 10, "the detail screen")
    screen = app.screen
    assert isinstance(screen, RunDetailScreen)
    await wait(lambda: screen.loads >= 1, 20, "the run to be read")
    await pilot.pause()
    return screen


@pytest.mark.slow
async def test_finished_run_shows_stats_telemetry_env_and_status(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_row(pilot, app, 0, wait_until_async)
        assert screen.detail is not None and screen.detail.run_id == data.ok_run
        head = text_of(screen, "#rd-head")
        assert f"run {data.ok_run}" in head and "ok" in head and "attempt 1/1" in head
        stats = text_of(screen, "#rd-stats")
        assert "500.0 ms/it" in stats and "480.0 / 550.0 ms/it" in stats
        assert "0.040" in stats and "128.0" in stats and "noisy" in stats
        tel = text_of(screen, "#rd-telemetry")
        for want in ("91 / 99 %", "231.5 W", "2315.0 J (counter)", "0.18", "12.0 GiB",
                     "sw_power_cap", "104 % (100 = 1 core)", "3.0 GiB", "yes (fake GPUs)"):
            assert want in tel, want
        env = text_of(screen, "#rd-env")
        assert "Test CPU 9000" in env and "550.54" in env and "N/A" in env  # no executable
        assert "step 24: loss 0.800" in text_of(screen, "#rd-log")
        # the trace: 25 iterations on the time axis, warm-up marked, loss, one GPU series
        trace = screen.trace
        assert trace is not None and trace.n_iterations == 25 and trace.has_loss
        assert trace.warmup_end_s is not None and len(trace.gpus) == 1
        assert not screen.query_one("#chart-loss").has_class("-hidden")
        # every chart of the GPU run shares the view: none takes the whole of it (they
        # were 1fr in a scroll view, each as tall as the view: only s/iter was in sight)
        await pilot.resize_terminal(160, 50)  # the H200 check's terminal
        await pilot.pause(0.5)
        view = screen.query_one("#rd-charts").scrollable_content_region.height
        shown = [c for c in screen.query("RunChart") if not c.has_class("-hidden")]
        assert {c.id for c in shown} >= {"chart-iter", "chart-loss", "chart-util",
                                         "chart-power", "chart-memory"}
        assert sum(c.region.height for c in shown) <= max(view, 8 * len(shown))
        assert all(c.region.height >= 8 for c in shown)
        await pilot.press("escape")
        await wait_until_async(lambda: isinstance(app.screen, MainScreen), 10, "main again")


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_crashed_run_shows_reason_and_stored_log_tail(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_row(pilot, app, 1, wait_until_async)
        status = text_of(screen, "#rd-status")
        assert "crashed" in status and "(crash)" in status
        assert "runner exited with status 1 before 'done'" in status
        assert "N/A: the file is gone" in status
        log = text_of(screen, "#rd-log")
        assert "RuntimeError: boom [/tmp/x]" in log and "stored when the run ended" in log
        stats = text_of(screen, "#rd-stats")
        assert "N/A" in stats
        tel = text_of(screen, "#rd-telemetry")
        assert "N/A: CPU job: no GPU" in tel
        await pilot.press("l")  # no file: a notice, no viewer
        await pilot.pause()
        assert isinstance(app.screen, RunDetailScreen)


@pytest.mark.slow
async def test_log_viewer_reaches_the_end_of_a_big_log(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    n = 400_000  # ~30 MB: several chunks, indexed in the worker while the first pages show
    write_big_log(data.log, n)
    app = make_app(data.seeded)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_row(pilot, app, 0, wait_until_async)
        await pilot.press("l")
        await wait_until_async(lambda: isinstance(app.screen, LogViewer), 10, "the viewer")
        viewer = app.screen
        lines = viewer.query_one(LogLines)
        await wait_until_async(lambda: lines.index.line_count > 0, 20, "the first chunk")
        await pilot.pause()
        assert lines.line_text(0).startswith("line 00000000")
        await wait_until_async(lambda: lines.index.complete, 60, "the whole log indexed")
        assert lines.index.line_count == n
        await pilot.press("G")
        await pilot.pause()
        top = int(lines.scroll_offset.y)
        assert top + lines.size.height == n
        assert lines.line_text(n - 1).startswith(f"line {n - 1:08d}")
        assert f"line {n - 1:08d}" in "".join(
            s.text for s in lines.render_line(lines.size.height - 1))
        await pilot.press("g")
        await pilot.pause()
        assert lines.scroll_offset.y == 0
        await pilot.press("escape")
        await wait_until_async(lambda: isinstance(app.screen, RunDetailScreen), 10, "back")


@pytest.mark.slow
async def test_running_run_updates_when_iterations_are_stored(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_row(pilot, app, 2, wait_until_async)
        assert screen.detail is not None and screen.detail.running
        assert screen.trace is not None and screen.trace.n_iterations == 12
        stats = text_of(screen, "#rd-stats")
        assert "Statistics so far" in stats and "n            7" in stats
        store = Store(connect(data.seeded.db_path))
        store.add_iterations(data.running_run, [
            {"idx": i, "seconds": 0.1, "samples": 64, "warmup": 0, "loss": 1.5}
            for i in range(12, 18)])
        await wait_until_async(lambda: screen.trace is not None
                               and screen.trace.n_iterations == 18, 20, "the new iterations")
        assert screen.trace is not None and screen.trace.iterations[-1].idx == 17
        await wait_until_async(lambda: "n            13" in text_of(screen, "#rd-stats"), 20,
                               "the statistics so far")


async def test_attempts_switch_with_brackets(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    store = Store(connect(data.seeded.db_path))
    job = data.seeded.job_ids[1]
    retry = store.start_run(job, data.seeded.campaign_id, 2, "", 64)
    store.finish_run(retry, job, "ok", {"median_s": 0.2, "n_iterations": 20})  # type: ignore[arg-type]
    app = make_app(data.seeded)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_row(pilot, app, 1, wait_until_async)
        assert screen.detail is not None and screen.detail.run_id == retry  # the latest
        assert "attempt 2/2" in text_of(screen, "#rd-head")
        loads = screen.loads
        await pilot.press("left_square_bracket")
        await wait_until_async(lambda: screen.loads > loads, 20, "the first attempt")
        assert screen.detail.run_id == data.crashed_run
        assert "attempt 1/2" in text_of(screen, "#rd-head")


async def test_a_queued_job_shows_its_run_once_it_starts(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_row(pilot, app, 3, wait_until_async)
        assert screen.detail is None and "no run yet (queued)" in text_of(screen, "#rd-head")
        store = Store(connect(data.seeded.db_path))
        run = store.start_run(data.seeded.job_ids[3], data.seeded.campaign_id, 1, "", 64)
        await wait_until_async(lambda: screen.detail is not None, 20, "the run to show")
        assert screen.detail is not None and screen.detail.run_id == run
        assert "running" in text_of(screen, "#rd-head")
        # nothing measured yet: every figure is N/A, with the reason
        assert "N/A: computed when the run ends" in text_of(screen, "#rd-stats")


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_a_failing_read_is_said_once_and_read_again(
        data: DetailSeed, monkeypatch: pytest.MonkeyPatch,
        wait_until_async: Callable[..., Any]) -> None:
    import sqlite3

    from dltop.tui import rundetail

    real, calls = rundetail.read_run_detail, []

    def flaky(db: Any, run_id: int) -> Any:
        calls.append(run_id)
        if len(calls) <= 3:
            raise sqlite3.OperationalError("database is locked")
        return real(db, run_id)

    monkeypatch.setattr(rundetail, "read_run_detail", flaky)
    app = make_app(data.seeded)
    notes: list[str] = []
    real_notify = app.notify

    def notify(message: str, **kw: Any) -> None:
        notes.append(message)
        real_notify(message, **kw)

    app.notify = notify  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        await pilot.press("enter")
        await wait_until_async(lambda: isinstance(app.screen, RunDetailScreen), 10, "screen")
        screen = app.screen
        assert isinstance(screen, RunDetailScreen)
        await wait_until_async(lambda: screen.loads >= 1, 30, "a read after the failures")
        assert len(calls) >= 4 and screen.detail is not None
        failed = [n for n in notes if "database is locked" in n]
        assert len(failed) == 1, notes


@pytest.mark.slow
async def test_a_pruned_run_draws_its_archived_seconds(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    from dltop.store.retention import Retention

    store = Store(connect(data.seeded.db_path))
    with store.db.conn:
        store.db.execute("update campaigns set status = 'finished'")
    Retention(store.db).prune_run(data.ok_run)
    data.log.unlink()
    app = make_app(data.seeded)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_row(pilot, app, 0, wait_until_async)
        assert screen.trace is not None and screen.trace.pruned
        assert not screen.query_one("#chart-iter").has_class("-hidden")
        assert screen.query_one("#chart-util").has_class("-hidden")
        assert "telemetry: N/A (raw rows deleted by dltop prune" in text_of(screen,
                                                                       "#charts-note")
        assert "deleted by dltop prune" in text_of(screen, "#rd-status")


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_a_read_slower_than_the_poll_still_shows(
        data: DetailSeed, monkeypatch: pytest.MonkeyPatch,
        wait_until_async: Callable[..., Any]) -> None:
    import time

    from dltop.tui import rundetail

    real = rundetail.extend_trace

    def slow(*args: Any, **kw: Any) -> Any:
        time.sleep(0.6)  # longer than the screen's poll (0.5 s): a big trace on a busy disk
        return real(*args, **kw)

    monkeypatch.setattr(rundetail, "extend_trace", slow)
    app = make_app(data.seeded)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_row(pilot, app, 2, wait_until_async)  # running: polled
        assert screen.detail is not None and screen.detail.running


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_the_log_of_a_running_run_is_followed(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_row(pilot, app, 2, wait_until_async)
        assert screen.detail is not None and screen.detail.log_path
        log = Path(screen.detail.log_path)
        await pilot.press("l")
        await wait_until_async(lambda: isinstance(app.screen, LogViewer), 10, "the viewer")
        lines = app.screen.query_one(LogLines)
        await wait_until_async(lambda: lines.index.line_count == 50, 20, "the log")
        await pilot.press("G")
        with log.open("a") as fh:  # noqa: ASYNC230 (the runner writing its log)
            fh.write("".join(f"more {i}\n" for i in range(40)))
        await wait_until_async(lambda: lines.index.line_count == 90, 20, "the new lines")
        await wait_until_async(
            lambda: int(lines.scroll_offset.y) + lines.size.height == 90, 10, "the end")
        assert lines.line_text(89) == "more 39"


async def test_a_convergence_run_shows_its_evaluations_and_operator_profile(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    store = Store(connect(data.seeded.db_path))
    store.add_evals(data.ok_run, [
        {"idx": 9, "epoch": 1.0, "accuracy": 0.61, "loss": 1.2, "eval_s": 0.2, "train_s": 5.0,
         "samples": 100, "t_mono_ns": int(5005.5e9)},
        {"idx": 19, "epoch": 2.0, "accuracy": 0.93, "loss": 0.3, "eval_s": 0.2,
         "train_s": 10.0, "samples": 100, "t_mono_ns": int(5010.5e9)}])
    store.set_profile(data.ok_run, {"profile_steps": 5, "profile_step_ms": 40.0,
                                    "profile_device": "cpu"},
                      [{"name": "aten::convolution_backward", "calls": 10, "self_cpu_ms": 100.0,
                        "self_device_ms": None, "total_ms": 120.0, "share_pct": 50.0},
                       {"name": "aten::addmm", "calls": 15, "self_cpu_ms": 20.0,
                        "self_device_ms": None, "total_ms": 20.0, "share_pct": 10.0}])
    app = make_app(data.seeded)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_row(pilot, app, 0, wait_until_async)
        conv = text_of(screen, "#rd-convergence")
        assert "accuracy" in conv and "61.00%" in conv and "93.00%" in conv
        assert "best 93.00% after 10.0 s of training" in conv
        prof = text_of(screen, "#rd-profile")
        assert "5 extra steps" in prof and "40.00 ms each on cpu" in prof
        lines = [line for line in prof.splitlines() if "aten::" in line]
        # per profiled step: 100 ms over 5 steps, 10 calls over 5 steps
        assert lines[0].split()[:4] == ["50.0%", "20.000", "2", "aten::convolution_backward"]
        assert not screen.query_one("#chart-eval").has_class("-hidden")
        assert screen.trace is not None and [e.accuracy for e in screen.trace.evals] == [
            0.61, 0.93]


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_a_run_without_evaluations_or_profile_shows_neither(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_row(pilot, app, 0, wait_until_async)
        assert text_of(screen, "#rd-convergence").strip() == ""
        assert text_of(screen, "#rd-profile").strip() == ""
        assert screen.query_one("#chart-eval").has_class("-hidden")


async def test_a_generate_run_shows_ttft_tpot_itl_and_decode_rate(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    store = Store(connect(data.seeded.db_path))
    # batch 2, 4 new tokens: 3 latencies per request; the warm-up request is left out
    store.add_generations(data.ok_run, [
        {"idx": i, "warmup": int(i == 0), "ttft_s": 0.1 * (i + 1), "e2e_s": 0.1 * (i + 1) + 0.03,
         "prompt_tokens": 16, "new_tokens": 4, "batch": 2,
         "itl_s": pack_seconds([0.01, 0.01, 0.01] if i else [9.0, 9.0, 9.0])}
        for i in range(3)])
    app = make_app(data.seeded)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_row(pilot, app, 0, wait_until_async)
        gen = text_of(screen, "#rd-generation")
        assert "2 measured requests, 6 inter-token latencies" in gen
        rows = {line.split()[0]: line.split()[1:] for line in gen.splitlines()
                if line.split() and line.split()[0] in ("TTFT", "TPOT", "ITL", "decode")}
        # p50 of 0.2, 0.3; two requests are too few for a p90 or p99 (n >= 10, 100)
        assert rows["TTFT"] == ["250.000", "N/A", "N/A"]
        assert rows["TPOT"] == ["10.000", "N/A", "N/A"] and rows["ITL"] == ["10.000"] + [
            "N/A"] * 2
        assert rows["decode"][0] == "200.0"  # 2 × 3 tokens × 2 requests / 0.06 s


async def test_a_run_without_generation_requests_has_no_generation_panel(
        data: DetailSeed, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(data.seeded)
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await open_row(pilot, app, 0, wait_until_async)
        assert text_of(screen, "#rd-generation").strip() == ""
        assert not screen.query_one("#rd-generation").display


LONG_LABEL = """
name = "long"
[[matrix]]
frameworks = ["command"]
models = ["a-model-name-of-forty-characters-or-so-x"]
batch_sizes = [8]
devices = ["cpu:1"]
command = ["true"]
"""


async def test_at_80_columns_the_title_keeps_the_status_of_a_long_label(
        tmp_path: Path, wait_until_async: Callable[..., Any]) -> None:
    # the status came after the label, and 80 columns cut it (it is in the Status
    # section, but the title is what the eye reads first)
    store = Store(connect(tmp_path / "t.db"))
    plan = campaign.preflight([parse(LONG_LABEL, "long.toml", "long")], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "long.toml"])
    job = queued[0].job_id
    rid = store.start_run(job, cid, 1, "", 8)
    store.finish_run(rid, job, "cancelled", {"error_message": "stopped by SIGTERM"})
    app = make_app(Seeded(tmp_path / "t.db", cid, [job], 0), gpus=0)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        table = app.screen.query_one(QueueTable)
        await wait_until_async(lambda: table.row_count == 1, 10, "the queue")
        table.move_cursor(0)
        await pilot.press("enter")
        await wait_until_async(lambda: isinstance(app.screen, RunDetailScreen), 10, "detail")
        screen = app.screen
        assert isinstance(screen, RunDetailScreen)
        await wait_until_async(lambda: screen.loads >= 1, 20, "the run to be read")
        await pilot.pause()
        head = screen.query_one("#rd-head")
        shown = "".join(seg.text for seg in head.render_line(0))
        assert head.size.width == 80 and f"run {rid}  cancelled  command" in shown, shown
        assert "a-model-name" in shown, shown  # the label gives way
