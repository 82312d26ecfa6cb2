"""Per-node GPUs of a Slurm run (issue 15): the main screen's rows and the run detail.

The run's remote GPUs are its node agents' rows in the database (``gpu_samples.node``),
stored here through the store as the engine stores them; the local devices stay as
they are.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from textual.widgets import Static

from dltop.live.devices import RemoteGpuReader
from dltop.live.nodegpus import node_gpu_lines
from dltop.live.rundetail import read_run_detail
from dltop.store import Store, connect
from dltop.telemetry.windows import GpuWindow
from dltop.tui.devices import DeviceLines, DevicesPanel
from dltop.tui.rundetail_rows import telemetry_rows

from .conftest import Seeded, make_app, seed


def _window(index: int, power: float, energy: float, t: float) -> GpuWindow:
    return GpuWindow(None, 0.0, index, 5, 50.0, 40.0, 60.0, 3 << 30, power, power, power,
                     energy, 60.0, 1400.0, True, t)


def _store_nodes(seeded: Seeded, t: float) -> None:
    store = Store(connect(seeded.db_path))
    for node, power in (("n1", 100.0), ("n2", 200.0)):
        store.telemetry.add_agent_samples(
            seeded.run_id, node,
            [_window(i, power, power * k, t + k) for k in range(2) for i in range(2)], [])
    store.db.close()


async def test_the_main_screen_shows_the_running_runs_remote_gpus(tmp_path: Path) -> None:
    seeded = seed(tmp_path)
    app = make_app(seeded, gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await app.refresh_now()
        await pilot.pause()
        assert app.campaign_view is not None and app.campaign_view.current is not None
        frame = app.device_frame
        assert frame is not None
        assert app._with_remote(frame).remote == ()  # a local run: nothing more
        _store_nodes(seeded, time.time())
        remote = app._with_remote(frame)
        assert [g.label for g in remote.remote] == ["n1:gpu0", "n1:gpu1", "n2:gpu0",
                                                    "n2:gpu1"]
        assert remote.remote[2].power_w == 200.0
        panel = app.screen.query_one(DevicesPanel)
        panel.show(remote)
        await pilot.pause()
        box = panel.query_one("#remote-gpus", Static)
        text = str(box.render())
        assert box.display and "n2:gpu1 SIM  50%  mem   3.0G  200W" in text
        assert len(app.screen.query_one(DeviceLines).gpus) == 2  # the local GPUs as before
        panel.show(replace(remote, remote=()))
        await pilot.pause()
        assert not box.display


def test_the_remote_reader_reads_only_new_rows(tmp_path: Path) -> None:
    seeded = seed(tmp_path)
    _store_nodes(seeded, 1e9)
    db = connect(seeded.db_path)
    reader = RemoteGpuReader()
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    first = reader.read(db, seeded.run_id)
    assert len(first) == 4 and all(g.t_wall_s == 1e9 + 1 for g in first)
    assert reader.read(db, seeded.run_id) == first  # nothing new: the same, from memory
    assert all("rowid > ?" in s or "rowid >" in s for s in statements if "gpu_samples" in s)
    assert reader.read(db, None) == ()


def test_the_run_detail_lists_every_node_gpu(tmp_path: Path) -> None:
    seeded = seed(tmp_path)
    _store_nodes(seeded, 1e9)
    detail = read_run_detail(connect(seeded.db_path), seeded.run_id)
    assert detail is not None
    assert [(g.label, g.power_mean_w, g.energy_j) for g in detail.node_gpus] == [
        ("n1:gpu0", 100.0, 100.0), ("n1:gpu1", 100.0, 100.0),
        ("n2:gpu0", 200.0, 200.0), ("n2:gpu1", 200.0, 200.0)]
    lines = dict(node_gpu_lines(detail.node_gpus))
    assert lines["n2:gpu1"] == "util 50 %, power 200 W, mem peak 3.0 GiB (simulated)"
    assert lines["n2 total"] == "2 GPUs, power 400 W, energy 400 J"
    assert ("n1 total", "2 GPUs, power 200 W, energy 200 J", "gpu") in telemetry_rows(detail)


def test_a_local_run_has_no_node_lines(tmp_path: Path) -> None:
    seeded = seed(tmp_path)
    detail = read_run_detail(connect(seeded.db_path), seeded.run_id)
    assert detail is not None and detail.node_gpus == ()
    assert not any(":gpu" in key for key, _, _ in telemetry_rows(detail))


def test_the_run_trace_keeps_each_nodes_gpu_0_apart(tmp_path: Path) -> None:
    from dltop.live.rundetail import extend_trace
    from dltop.results.runtrace import read_trace

    seeded = seed(tmp_path)
    _store_nodes(seeded, 1e9)
    db = connect(seeded.db_path)
    trace = read_trace(db, seeded.run_id)
    assert [(s.label, len(s.points)) for s in trace.gpus] == [
        ("n1:gpu0", 2), ("n1:gpu1", 2), ("n2:gpu0", 2), ("n2:gpu1", 2)]
    assert {p.power_w for p in trace.gpus[2].points} == {200.0}
    again = extend_trace(db, None, seeded.run_id)
    assert [s.label for s in again.gpus] == [s.label for s in trace.gpus]
