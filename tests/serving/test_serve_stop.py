"""A serve run that cannot pass stops early (issue 41, the audit): a hung server's run
fails once its errors exceed ``max_error_rate`` of the measured requests, its requests in
flight cut and stored; a refused key is ``setup_failed`` after the first refusals."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.serving.conftest import named, run_runner, spec

CUT = "cut in flight: the run stopped early (its message says why)"


def test_a_hung_server_fails_the_run_once_it_cannot_pass(tmp_path: Path, fake_server) -> None:
    url = fake_server()
    # timeout_s 10: a request stalls after 1 s. Before: 2 warm-up and 20 measured
    # stalls, 2 at a time (11 s), the run failing only at their end.
    job = spec(url, "hang", iterations=20, warmup=2, concurrency=2, timeout_s=10.0)
    t0 = time.monotonic()
    code, events, err = run_runner(tmp_path, job)
    took = time.monotonic() - t0
    assert code == 3, err
    (error,) = named(events, "error")
    assert error["kind"] == "crash"
    assert error["message"].startswith(
        "stopped early: 2 of 20 measured requests failed, more than max_error_rate 5.0 % "
        "of them allows (1): the run cannot pass; 2 sent, 0 of them cut in flight, "
        "18 never sent; first errors: request 2: stalled: no data for 1 s"), error["message"]
    reqs = named(events, "request")
    measured = [r for r in reqs if not r["warmup"]]
    assert [r["error"] for r in measured] == ["stalled: no data for 1 s (the read timeout)"] * 2
    # the warm-up that never answered ended at its first failure: the other one cut
    warm = sorted(r["error"] for r in reqs if r["warmup"])
    assert warm in (sorted([CUT, "stalled: no data for 1 s (the read timeout)"]),
                    ["stalled: no data for 1 s (the read timeout)"] * 2), warm
    (summary,) = named(events, "load")
    assert (summary["ok"], summary["failed"]) == (0, 2)
    assert took < 8, took  # two stalls of 1 s, the probe's 1 s, and the starts


@pytest.mark.parametrize("processes", [1, 2])
def test_a_cut_request_is_stored_as_cut(tmp_path: Path, fake_server, processes: int) -> None:
    # 5 at a time: 429, 500, reset and malformed end at once and spend the budget (2 of
    # 40); the stall, in flight, is cut rather than waited for (its 1 s). Split over two
    # client processes, the runner's judgement stops both.
    url = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    job = spec(url, "edges", iterations=40, warmup=0, concurrency=5, timeout_s=10.0,
               options={"client_processes": processes})
    code, events, err = run_runner(tmp_path, job)
    assert code == 3, err
    (error,) = named(events, "error")
    reqs = named(events, "request")
    cut = [r for r in reqs if r["error"] == CUT]
    assert cut and all(r["status"] in (0, 200) for r in cut)
    assert not [r for r in reqs if (r["error"] or "").startswith("stalled")]
    assert f"{len(reqs)} sent, {len(cut)} of them cut in flight, {40 - len(reqs)} never " \
        "sent; first errors: request " in error["message"], error["message"]
    assert "HTTP 429" in error["message"]
    (summary,) = named(events, "load")
    assert summary["failed"] == len(reqs) - len(cut)  # a cut request is no server error


def test_a_refused_key_is_setup_failed_after_the_first_refusals(tmp_path: Path,
                                                                fake_server) -> None:
    url = fake_server("--api-key", "s3cret", "--ttft-ms", "1", "--itl-ms", "1")
    job = spec(url, "steady", iterations=200, warmup=2, concurrency=1,
               options={"api_key_env": "DLTOP_TEST_KEY"})
    code, events, err = run_runner(tmp_path, job, env={"DLTOP_TEST_KEY": "sk-wrong-42"})
    assert code == 3, err
    (error,) = named(events, "error")
    assert error == {**error, "kind": "setup", "message": (
        'the server refused the key from api_key_env DLTOP_TEST_KEY (HTTP 401: {"error": '
        '{"message": "Invalid API Key", "type": "authentication_error", "code": 401}})')}
    reqs = named(events, "request")
    assert [r["status"] for r in reqs] == [401] * 3  # the first refusals, never the load
    assert "sk-wrong-42" not in json.dumps(events) + err
