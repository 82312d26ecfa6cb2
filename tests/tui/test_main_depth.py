"""The main screen's depth: the run panel's loss, elapsed, stall, tree CPU/RSS and campaign
ETA; the GPU process panel; throttle reasons; graphs that fill the width; all host cores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dltop.live import campaign as live_campaign
from dltop.live import devices as live_devices
from dltop.live.campaign import read_campaign
from dltop.live.devices import DevicePoller
from dltop.store import connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import GpuProcess, HostSample
from dltop.tui.devices import DeviceLines
from dltop.tui.gpuprocs import GpuProcsPanel
from dltop.tui.queue import QueueTable
from dltop.tui.runpanel import RunHealth, RunPanel, RunRate

from .conftest import FIXED_TIME, SteppingClock, fixed_host, make_app, seed

T0 = 1_795_348_800.0  # FIXED_TIME (2026-11-22T12:00:00Z) as epoch seconds


def _live_run(s: Any) -> None:
    """The seeded run's iterations get wall times (the last at T0 + 80 s) and losses that
    fall; its process tree has one telemetry window."""
    db = connect(s.db_path, create=False)
    with db.conn:
        db.execute("update iterations set t_wall_s = ? + idx * 0.125, loss = 3.0 - idx * 0.1 "
                   "where run_id = ?", [T0 + 80 - 11 * 0.125, s.run_id])
        db.execute("insert into host_samples (run_id, t_start_mono_s, n, tree_cpu_pct, "
                   "tree_rss_bytes, t_wall_s) values (?, 1.0, 2, 187.5, ?, ?)",
                   [s.run_id, 3 * 2**30 // 2, T0 + 79])


def test_epoch_constant_is_the_fixed_time() -> None:
    from datetime import datetime

    assert datetime.fromisoformat(FIXED_TIME.replace("Z", "+00:00")).timestamp() == T0


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_run_panel_shows_loss_elapsed_tree_and_then_stall(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = seed(tmp_path)
    _live_run(s)
    now = [T0 + 83.0]
    monkeypatch.setattr(live_campaign, "wall_clock", lambda: now[0])
    app = make_app(s)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        health = app.screen.query_one(RunHealth).render().plain
        assert "loss 1.9 ↓" in health  # 3.0 - 11 x 0.1, falling
        assert "cpu 188% rss 1.5 GiB" in health
        assert "stalled" not in health
        assert "elapsed 1:23" in app.screen.query_one(RunRate).render().plain
        now[0] = T0 + 80 + 6.0  # median step ~0.12 s: the bound is 5 s
        await app.refresh_now()
        await pilot.pause()
        health_widget = app.screen.query_one(RunHealth)
        assert "stalled: no iteration for 6 s" in health_widget.render().plain
        stall = health_widget.run.stall if health_widget.run else None
        assert stall is not None and stall.stalled and stall.bound_s == 5.0


async def test_campaign_eta_from_finished_runs(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    s = seed(tmp_path)
    db = connect(s.db_path, create=False)
    assert (view := read_campaign(db, s.campaign_id)) is not None and view.eta is None, \
        "no engine runs the campaign: no ETA"
    monkeypatch.setattr(live_campaign, "engine_alive", lambda *_: True)  # labelled
    view = read_campaign(db, s.campaign_id)
    assert view is not None and view.eta is not None
    assert view.eta.text().startswith("ETA unknown")  # the seeded ok run took no time
    with db.conn:  # the ok run (25 iterations with warm-up) took 10 s: 0.4 s/it
        db.execute("update runs set finished_at = '2026-11-22T12:00:10Z' where status = 'ok'")
        db.execute("update jobs set status = status")  # a write that changes no count
    view = read_campaign(db, s.campaign_id)
    assert view is not None and view.eta is not None
    # Still cached (no job changed status): a queue is summed once per finished run.
    assert view.eta.seconds is None
    with db.conn:
        db.execute("update jobs set status = 'removed' where id = ?", [s.job_ids[5]])
    view = read_campaign(db, s.campaign_id)
    assert view is not None and view.eta is not None and view.eta.seconds is not None
    # 2 queued jobs x 25 iterations x 0.4 s, plus the running one's 13 left at ~0.12 s
    assert abs(view.eta.seconds - (20.0 + 13 * 0.12)) < 1e-3  # julianday: ~ms precision
    assert view.eta.text() == "ETA ≈ 22 s (from 1 finished run)"
    monkeypatch.setattr(live_campaign, "wall_clock", lambda: T0)
    app = make_app(s, gpus=0)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        assert "campaign ETA ≈ 22 s (from 1 finished run)" in \
            app.screen.query_one(RunHealth).render().plain


def test_a_requeued_job_shows_no_stale_median(tmp_path: Path) -> None:
    s = seed(tmp_path)
    db = connect(s.db_path, create=False)
    view = read_campaign(db, s.campaign_id)
    assert view is not None and view.jobs[0].median_s == 0.05
    with db.conn:
        db.execute("update jobs set status = 'queued' where id = ?", [s.job_ids[0]])
    view = read_campaign(db, s.campaign_id)
    assert view is not None
    assert view.jobs[0].status == "queued" and view.jobs[0].median_s is None
    # a crashed run's median (0.1 stored) is not a result: the queue shows none
    assert view.jobs[1].status == "crashed" and view.jobs[1].median_s is None


def _text(lines: DeviceLines, row: Any) -> str:
    """One device row (``lines.gpus[i]`` or ``lines.host``) as plain text at the widget's width."""
    return "".join(t for t, _ in row.parts(lines.size.width))


def _procs(index: int) -> tuple[GpuProcess, ...]:
    return ((GpuProcess(900_001 + index, 3 * 2**29, 87.0),
             GpuProcess(900_100, 256 * 2**20, None)) if index < 2 else ())


def _who(pid: int) -> tuple[str, str]:
    return ("alice", f"python train.py --rank {pid % 100}")


async def test_gpu_process_panel_lists_processes_from_telemetry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_devices, "describe_process", _who)  # labelled fake: no real pids
    s = seed(tmp_path)
    backend = FakeGpuBackend(4, clock_ns=SteppingClock(), processes=_procs,
                             throttle=lambda i: 0x4 | 0x1 if i == 1 else 0x1)
    app = make_app(s, backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        panel = app.screen.query_one(GpuProcsPanel)
        assert panel.region.height > 0 and len(panel.processes) == 4
        text = panel.render().plain
        assert "900001" in text and "alice" in text and "python train.py --rank 1" in text
        assert "1.5 GiB" in text and "87%" in text and "256 MiB" in text
        # GPU 0's rows first, largest memory first
        assert [p.pid for p in panel.processes] == [900_001, 900_100, 900_002, 900_100]
        # throttle reasons: gpu_idle alone says nothing; sw_power_cap is shown on GPU 1
        lines = app.screen.query_one(DeviceLines)
        assert "sw_power_cap" in _text(lines, lines.gpus[1])
        assert "gpu_idle" not in _text(lines, lines.gpus[0])


async def test_no_room_for_gpu_processes_at_80x24_with_8_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_devices, "describe_process", _who)
    backend = FakeGpuBackend(8, clock_ns=SteppingClock(), processes=_procs)
    app = make_app(seed(tmp_path), backend=backend)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        assert app.screen.query_one(GpuProcsPanel).region.height == 0
        # the queue keeps its three rows and the run panel ends above the key bar
        assert app.screen.query_one(QueueTable).region.height == 3
        assert app.screen.query_one(RunPanel).region.bottom <= 23
        await pilot.resize_terminal(80, 30)
        await pilot.pause()
        assert app.screen.query_one(GpuProcsPanel).region.height > 0


async def test_gpu_process_panel_hidden_without_processes(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.refresh_now()
        await pilot.pause()
        assert app.screen.query_one(GpuProcsPanel).region.height == 0


async def _graph_width(tmp_path: Path, size: tuple[int, int]) -> tuple[int, str]:
    s = seed(tmp_path)
    app = make_app(s, gpus=8)
    poller = DevicePoller(FakeGpuBackend(8, clock_ns=SteppingClock()), fixed_host)
    async with app.run_test(size=size) as pilot:
        await app.refresh_now()
        await pilot.pause()
        for _ in range(400):  # 100 s at 4 Hz: more readings than any graph's columns
            app.screen.show_devices(poller.poll())  # type: ignore[attr-defined]
        await pilot.pause()
        lines = app.screen.query_one(DeviceLines)
        util_w, _ = lines.gpus[0].graph_widths(lines.size.width)
        return util_w, _text(lines, lines.gpus[0])


@pytest.mark.slow
async def test_graphs_fill_the_width(tmp_path: Path) -> None:
    narrow, narrow_text = await _graph_width(tmp_path / "a", (80, 24))
    wide, wide_text = await _graph_width(tmp_path / "b", (200, 60))
    assert narrow >= 6 and wide >= 80 and wide > 2 * narrow
    # the graph is full of readings: no blank history at the left of it
    start = len(" 0 SIM Simulated GPU  ")  # the index and name before the graph
    graph = wide_text[start:start + wide]
    assert len(graph) == wide and " " not in graph
    assert len(wide_text) <= 200 and len(narrow_text) <= 80


async def test_all_host_cores_are_shown_grouped_when_they_do_not_fit(tmp_path: Path) -> None:
    app = make_app(seed(tmp_path), gpus=0)
    async with app.run_test(size=(120, 30)) as pilot:
        lines = app.screen.query_one(DeviceLines)
        row = lines.host
        cores = tuple(float(100 * (i % 2)) for i in range(40))  # 40 cores: more than 32
        row.push(HostSample(0, cores, 1.0, 2**30, 2**34, 0))
        await pilot.pause()
        bars_w, _ = row.layout_widths(lines.size.width)
        assert bars_w == 40  # all of them, one bar each (it was the last 32)
        assert "▁█" * 20 in _text(lines, lines.host)
        many = tuple(100.0 if i < 128 else 0.0 for i in range(256))
        row.push(HostSample(0, many, 1.0, 2**30, 2**34, 0))
        await pilot.pause()
        text = _text(lines, lines.host)
        assert "×" in text  # cores per bar
        bars_w, _ = row.layout_widths(lines.size.width)
        per = -(-256 // bars_w)
        n_bars = -(-256 // per)
        assert n_bars <= bars_w and text.count("█") == -(-128 // per)
        assert len(text) <= 120


def test_poller_describes_each_gpu_process_once_while_it_lives() -> None:
    asked: list[int] = []
    present = [True]

    def procs(index: int) -> tuple[GpuProcess, ...]:
        return (GpuProcess(900_007, 2**30, 50.0),) if present[0] and index == 0 else ()

    def who(pid: int) -> tuple[str, str]:
        asked.append(pid)
        return ("bob", "train")

    poller = DevicePoller(FakeGpuBackend(2, processes=procs), fixed_host, describe=who)
    frames = [poller.poll() for _ in range(9)]  # slow reads at frames 0, 4, 8
    assert asked == [900_007]
    assert all(f.processes and f.processes[0].user == "bob" for f in frames)
    present[0] = False
    assert [poller.poll() for _ in range(4)][-1].processes == ()  # next slow read: gone
    present[0] = True
    poller.poll()
    poller.poll()
    poller.poll()
    poller.poll()  # a slow read again: asked again (the pid may be another process now)
    assert asked == [900_007, 900_007]
