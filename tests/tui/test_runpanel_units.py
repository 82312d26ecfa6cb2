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
                      [0.123] * 99_999, itl)
    panel = RunServe()
    panel.run = RunView(1, 1, "run", 5, 10, 0, None, None, recent_s=(),
                        samples_per_iter=1, log_tail=(), serve=serve)
    lines = panel.render().plain.split("\n")
    assert lines == ["256 in flight  99,999 ok  9,999 failed  10,000/10000 req/s  999,999 tok/s",
                     "TTFT p50 123 ms p99 123 ms n=99,999  ITL p50 12.3 ms p99 1.5 s "
                     "n=1,234,567", "last error: HTTP 500: x"]
    assert max(len(line) for line in lines[:2]) <= 80
