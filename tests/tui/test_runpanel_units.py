"""The run panel's live rate names what a sample is: tokens/s for a transformer's run,
samples/s otherwise (issue 40; :mod:`dltop.results.tokens`). A real database."""

from __future__ import annotations

import dataclasses

import pytest

from dltop.live.campaign import read_campaign
from dltop.profiles.loader import parse
from dltop.store import Store, memory_db
from dltop.tui.runpanel import RunRate


@pytest.mark.parametrize(("model", "unit", "other"), [("gpt2-small", "tokens/s", "samples/s"),
                                                      ("fcn-r", "samples/s", "tokens/s")])
def test_the_live_rate_says_tokens_for_a_transformer(model: str, unit: str, other: str) -> None:
    store = Store(memory_db())
    jobs = parse(f'[defaults]\nwarmup = 0\n[[matrix]]\nframeworks = ["torch"]\nmodels = '
                 f'["{model}"]\nbatch_sizes = [2]\ndevices = ["cpu:1"]\n', "p.toml", "p").jobs
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    store.start_run(store.add_jobs(cid, jobs)[0], cid, 1, "", 1)
    view = read_campaign(store.db, cid)
    assert view is not None and view.current is not None
    assert view.current.model == model
    rate = RunRate()
    rate.run = dataclasses.replace(view.current, recent_s=(0.5, 0.5, 0.5))
    text = rate.render().plain
    assert f" {unit}" in text and other not in text


@pytest.mark.parametrize(("model", "unit"), [("gpt2-small", "tokens/s"),
                                             ("fcn-r", "samples/s"), ("", "samples/s")])
def test_the_run_details_rate_row_says_tokens_for_a_transformer(model: str, unit: str) -> None:
    from dltop.live.rundetail import RunStats
    from dltop.tui.rundetail_rows import stats_rows

    stats = RunStats(10, 0.5, 0.5, 0.4, 0.6, 0.01, False, 2048.0, 3.2)
    rows = {key: value for key, value, _ in stats_rows(stats, model)}
    assert rows[unit] == "2048.0" and len({"tokens/s", "samples/s"} & set(rows)) == 1


def test_a_serve_run_s_lines_fit_80_columns_at_large_counts() -> None:
    from dltop.live.campaign import RunView
    from dltop.live.serve_live import ServeLive
    from dltop.tui.runpanel import RunServe

    itl = [0.0123] * 1_234_567
    itl[-15_000:] = [1.5] * 15_000  # a p99 over a second: said in s, not 1.5e+03 ms
    serve = ServeLive(10000.0, 5, 99_999, 9_999, 256, 10.0, 9_999_990, "HTTP 500: x",
                      [0.123] * 99_999, itl, now_s=10.0, recent_ok=99_999,
                      recent_tokens=9_999_990)
    panel = RunServe()
    panel.run = RunView(1, 1, "run", 5, 10, 0, None, None, recent_s=(),
                        samples_per_iter=1, log_tail=(), serve=serve)
    lines = panel.render().plain.split("\n")
    assert lines == ["256 in flight  99,999 ok  9,999 failed  10,000/10000 req/s  999,999 tok/s",
                     "TTFT p50 123 ms p99 123 ms n=99,999  ITL p50 12.3 ms p99 1.5 s "
                     "n=1,234,567", "last error: HTTP 500: x"]
    assert max(len(line) for line in lines[:2]) <= 80


def test_a_serve_run_s_eta_and_rate_line_follow_its_request_rate_not_its_latency() -> None:
    """An open loop at 5 req/s whose requests each take 0.5 s: 100 requests left end in
    20 s, not in 100 x 0.5 s (the panel said ``ETA 1:04`` where 25 s were left, and
    ``507 ms/it 63 samples/s`` for latencies of requests in flight together). Its stall
    bound allows the gap between arrivals, a loss is not asked of it. A real database."""
    from dltop.tui.runpanel import RunHealth

    store = Store(memory_db())
    jobs = parse('[defaults]\nframeworks = ["openai"]\nmode = "serve"\nendpoint = '
                 '"http://h:1/v1"\niterations = 150\nwarmup = 0\n[[matrix]]\nmodels = '
                 '["m"]\nrequest_rate = [0.05, 5]\n', "p.toml", "p").jobs
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    slow, fast = store.add_jobs(cid, jobs)
    rid = store.start_run(fast, cid, 1, "", 1)
    n = 50  # requests ended so far, one every 0.2 s from the load's start
    store.add_iterations(rid, [{"idx": i, "seconds": 0.5, "samples": 32, "warmup": 0,
                                "t_wall_s": 1e9 + 0.2 * i} for i in range(n)])
    store.add_serve_requests(rid, [
        {"idx": i, "request": i, "warmup": 0, "scheduled_s": 0.2 * i - 0.5,
         "dispatch_lag_s": 0.0, "slot_wait_s": 0.0, "ttft_s": 0.04, "e2e_s": 0.5,
         "status": 200, "error": None, "output_tokens": 32, "tokens_estimated": 0,
         "chunk_s": None, "chunk_tokens": None, "in_flight": 3, "resent": 0,
         "resend_s": 0.0} for i in range(n)])
    view = read_campaign(store.db, cid)
    assert view is not None and view.current is not None and view.current.serve is not None
    run = view.current
    assert run.total - run.done == 100 and run.median_s == 0.5
    assert run.eta_s == pytest.approx(100 / (n / run.serve.window_s))
    assert run.eta_s == pytest.approx(20, rel=0.02)  # 9.8 s window: 50 ended at 5.1/s
    rate = RunRate()
    rate.run = run
    line = rate.render().plain
    assert "e2e p50 500 ms" in line and "ETA 0:20" in line
    assert "/it" not in line and "samples/s" not in line
    health = RunHealth()
    health.run = dataclasses.replace(run, read_s=1e9 + 0.2 * (n - 1) + 10)
    assert "loss" not in health.render().plain
    store.finish_run(rid, fast, "ok", {})
    # 0.05 req/s: a request ends every 20 s; 30 s without one is no stall, 210 s is
    rid = store.start_run(slow, cid, 1, "", 1)
    store.add_iterations(rid, [{"idx": 0, "seconds": 0.5, "samples": 32, "warmup": 0,
                                "t_wall_s": 1e9}])
    view = read_campaign(store.db, cid)
    assert view is not None and view.current is not None
    quiet = [dataclasses.replace(view.current, read_s=1e9 + s).stall for s in (30, 210)]
    assert [q.stalled for q in quiet if q is not None] == [False, True]
