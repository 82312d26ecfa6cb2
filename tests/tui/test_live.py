"""The headless readers behind the TUI: bounded log tails, coalesced campaign reads."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dltop import procs
from dltop.live.campaign import LOG_TAIL_BYTES, read_campaign, read_log_tail
from dltop.live.devices import SLOW_EVERY, DevicePoller
from dltop.store import connect
from dltop.telemetry.fake import FakeGpuBackend

from .conftest import fixed_host, seed


def test_a_flooded_log_costs_only_its_tail(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "flood.log"
    with open(log, "w") as fh:
        for i in range(400_000):  # ~ 12 MB, and one 1 MB line without a newline at the end
            fh.write(f"step {i} loss 0.123456 lr 0.01 padding padding\n")
        fh.write("x" * 2**20)
    # Bytes read, not seconds: a wall-time bound flakes on a loaded machine.
    read: list[int] = []

    class Counting(io.BufferedReader):
        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            read.append(len(data))
            return data

    # procs opens the log by descriptor (O_NOFOLLOW), then wraps it with os.fdopen.
    monkeypatch.setattr(procs.os, "fdopen", lambda fd, mode: Counting(io.FileIO(fd, mode)))
    tail = read_log_tail(str(log), lines=5)
    assert 0 < sum(read) <= LOG_TAIL_BYTES  # of a 13 MB file
    assert len(tail) <= 5 and sum(len(t) for t in tail) <= LOG_TAIL_BYTES
    assert tail[-1] == "…" + "x" * 499  # long lines are cut, marked, not dropped
    assert read_log_tail(str(tmp_path / "missing.log")) == ()


def test_campaign_view_reports_progress_rate_and_eta(tmp_path: Path) -> None:
    s = seed(tmp_path)
    view = read_campaign(connect(s.db_path, create=False), s.campaign_id)
    assert view is not None and view.current is not None
    cur = view.current
    assert (cur.done, cur.total, cur.in_warmup) == (12, 25, False)
    # Warm-up iterations (0-4) are left out of the rate.
    assert [round(x, 2) for x in cur.recent_s] == [0.11, 0.12, 0.13, 0.1, 0.11, 0.12, 0.13]
    assert cur.median_s is not None and abs(cur.median_s - 0.12) < 1e-9
    assert cur.eta_s is not None and abs(cur.eta_s - 13 * 0.12) < 1e-9
    assert [j.status for j in view.jobs] == ["ok", "crashed", "running", "queued", "queued",
                                             "queued"]
    assert view.jobs[0].median_s == 0.05


def test_device_poller_reads_slow_fields_every_few_frames_and_carries_them(
        tmp_path: Path) -> None:
    backend = FakeGpuBackend(2)
    slow_flags: list[bool] = []
    sample = backend.sample

    def spy(index: int, slow: bool):  # type: ignore[no-untyped-def]
        slow_flags.append(slow)
        return sample(index, slow)

    backend.sample = spy  # type: ignore[method-assign]
    poller = DevicePoller(backend, fixed_host)
    frames = [poller.poll() for _ in range(SLOW_EVERY + 1)]
    assert slow_flags == ([True] * 2 + [False] * 2 * (SLOW_EVERY - 1)) + [True] * 2
    assert all(g.temperature_c is not None for f in frames for g in f.gpus)
    assert frames[0].host == fixed_host() and frames[0].statics[0].simulated
