"""The run detail screen of a serve run (issue 41 item 6): latency over time and the TTFT
and ITL histograms, drawn from a real serve run against the streaming fake server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.dltop_env import query
from tests.serving.conftest import start_fake

from dltop.live import campaign as live_campaign
from dltop.store import Store, connect
from dltop.store.generations import pack_seconds, unpack_seconds
from dltop.store.serving import pack_counts, unpack_counts
from dltop.tui.charts import SERVE_CHARTS, RunChart
from dltop.tui.rundetail import RunDetailScreen

from .conftest import make_app
from .detail_data import DetailSeed, seed_detail
from .test_rundetail_snapshots import open_detail
from .test_rundetail_startup import plot_rows

PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 8
prompt_tokens = 4
iterations = 12
warmup = 1
request_rate = 50
concurrency = 2
arrival = "constant"
timeout_s = 30
[[matrix]]
models = ["multi"]
"""


@pytest.fixture
def serve_db(tmp_path: Path) -> Path:
    proc, url = start_fake("--ttft-ms", "15", "--itl-ms", "3")
    try:
        (tmp_path / "serve.toml").write_text(PROFILE.format(url=url))
        db = tmp_path / "d.db"
        res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run",
                              str(tmp_path / "serve.toml")], capture_output=True, text=True,
                             timeout=240, env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        proc.kill()
        proc.wait()
    return db


@pytest.mark.slow  # a serve run, then charts built in thread workers
async def test_a_serve_runs_detail_draws_its_requests(
        serve_db: Path, wait_until_async: Callable[..., Any]) -> None:
    app = make_app(SimpleNamespace(db_path=serve_db), gpus=0)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 120)) as pilot:  # rows for every chart
        screen = RunDetailScreen(serve_db, 1)
        app.push_screen(screen)
        await wait_until_async(lambda: screen.loads >= 1, 20, "the run to be read")
        charts = {c.id: c for c in screen.query(RunChart)}
        shown = [charts[f"chart-{name}"] for name in SERVE_CHARTS]
        assert not any(c.has_class("-hidden") for c in shown)
        await pilot.pause()
        await wait_until_async(lambda: all(c.built for c in shown), 30, "the charts")
        trace = screen.detail.serving if screen.detail else None
        assert trace is not None
        # the screen's numbers are the stored requests', in send order
        stored = query(serve_db, "select ttft_s, e2e_s, scheduled_s + dispatch_lag_s + "
                       "slot_wait_s as sent, chunk_s, chunk_tokens from serve_requests "
                       "where warmup = 0 order by sent")
        assert list(trace.ttft_s) == [r["ttft_s"] for r in stored]
        assert list(trace.e2e_s) == [r["e2e_s"] for r in stored]
        assert sum(b.count for b in trace.ttft_bins) == 12 and trace.failed == 0
        # three tokens a chunk: 8 tokens are 7 per-token gaps, the first chunk's 2 zeros
        assert trace.n_itl == 12 * 7 and sum(b.count for b in trace.itl_bins) == 12 * 7
        per_token = []  # docs/metrics.md: a chunk of k tokens is k equal gaps
        for r in stored:
            times, counts = unpack_seconds(r["chunk_s"]), unpack_counts(r["chunk_tokens"])
            per_token += [0.0] * (counts[0] - 1) + [
                (times[i] - times[i - 1]) / counts[i] for i in range(1, len(times))
                for _ in range(counts[i])]
        assert len(per_token) == 12 * 7 and trace.itl_bins[0].lo_s == min(per_token) == 0.0
        assert trace.itl_bins[-1].hi_s == pytest.approx(max(per_token))
        titles = {c.id: str(getattr(c.render(), "plain", "")) for c in shown}
        assert "latency ms per request: TTFT, E2E" in titles["chart-latency"]
        assert "TTFT histogram (12 ok requests)" in titles["chart-ttft-hist"]
        assert "ITL histogram (84 per-token gaps)" in titles["chart-itl-hist"]
        for chart in shown:  # each draws something between its axes
            assert any(row.strip(" │") for row in plot_rows(chart)), chart.id
        # its iterations are its requests' latencies: no "s/iter" chart, "ms/req" and no
        # samples/s or loss in the statistics (they read 507.8 ms/it, samples/s 62.9)
        assert charts["chart-iter"].has_class("-hidden")
        stats = str(screen.query_one("#rd-stats").render())
        assert " ms/req" in stats and "/it" not in stats, stats
        assert "samples/s" not in stats and "loss" not in stats
        requests = str(screen.query_one("#rd-generation").render())  # the client's timings
        assert requests.startswith("Requests") and "from each request's send" in requests
        assert "device synchronised" not in requests


def _seed_requests(d: DetailSeed) -> None:
    """The seeded GPU run (:mod:`detail_data`) made a serve run of 16 fixed requests: one
    every 50 ms, TTFT 20 ms rising by 1 ms a request, a chunk of one token every 4 ms."""
    db = connect(d.seeded.db_path)
    with db.conn:
        db.execute("update jobs set framework = 'openai', model = 'steady' where id = "
                   "(select job_id from runs where id = ?)", [d.ok_run])
    rows = []
    for i in range(17):
        ttft = 0.020 + 0.001 * i
        chunks = [ttft + 0.004 * k for k in range(8)]
        rows.append({"idx": i, "request": i, "warmup": int(i == 0), "scheduled_s": 0.05 * i,
                     "dispatch_lag_s": 0.0, "slot_wait_s": 0.0, "first_byte_s": ttft,
                     "ttft_s": ttft, "e2e_s": chunks[-1] + 0.001, "status": 200,
                     "output_tokens": 8, "tokens_estimated": 0,
                     "chunk_s": pack_seconds(chunks), "chunk_tokens": pack_counts([1] * 8)})
    Store(db).add_serve_requests(d.ok_run, rows)


@pytest.mark.slow
def test_serve_run_detail_200x100(snap_compare: Any, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_campaign, "engine_alive", lambda *_: True)
    d = seed_detail(tmp_path)
    monkeypatch.chdir(tmp_path)
    _seed_requests(d)
    assert snap_compare(make_app(d.seeded, gpus=0), terminal_size=(200, 100),
                        run_before=open_detail(0))
