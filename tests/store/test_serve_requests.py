"""A serve run's requests in the store (migration 26, issue 41): the engine's rows of
``request`` events with their packed chunk arrays, the run's load columns and its
``client-bound`` flag, the protocol's checks, and deleting a campaign."""

from __future__ import annotations

from typing import Any

import pytest

from dltop.catalog import CampaignStatus, RunStatus
from dltop.jobs.evals import RunExtras
from dltop.jobs.protocol import EventChecker
from dltop.jobs.serving import LAG_BOUND_S
from dltop.store import Store
from dltop.store.generations import unpack_seconds
from dltop.store.serving import unpack_counts

from .conftest import campaign


def _direct(fn: Any, *args: Any, **_what: Any) -> None:  # the engine's write_later, now
    fn(*args)


def request(i: int, *, lag: float = 0.001, warmup: bool = False,
            error: str | None = None) -> dict[str, Any]:
    return {"v": 1, "event": "request", "index": i, "request": i, "warmup": warmup,
            "scheduled_s": 0.1 * i, "dispatch_lag_s": lag, "slot_wait_s": 0.002,
            "first_byte_s": 0.01, "ttft_s": None if error else 0.02, "e2e_s": 0.05,
            "status": 500 if error else 200, "error": error, "prompt_tokens": 8,
            "output_tokens": 0 if error else 4, "tokens_estimated": False,
            "chunk_s": [] if error else [0.02, 0.03, 0.05],
            "chunk_tokens": [] if error else [2, 1, 1], "in_flight": i % 2}


def _extras(store: Store) -> tuple[int, int, RunExtras]:
    """(campaign id, job id, the run's extras)."""
    cid, (job_id, *_) = campaign(store, 1)
    run_id = store.start_run(job_id, cid, 1, "", 2)
    return cid, job_id, RunExtras(run_id, store, _direct, inference=False)


def test_requests_become_rows_and_the_load_the_run_columns(store: Store) -> None:
    _, _, extras = _extras(store)
    events = [request(0, warmup=True, lag=0.5), request(1), request(2, error="HTTP 500: x"),
              {"v": 1, "event": "load", "window_s": 2.0, "client_cpu_s": 0.4,
               "asked_rate": 5.0}]
    checker = EventChecker()
    for e in events:
        assert checker.problem(e) is None, e
        assert extras.on_event(e)
    extras.flush(final=True)
    rows = list(store.db.query("select * from serve_requests order by idx"))
    assert [(r["idx"], r["request"], r["warmup"], r["status"], r["error"]) for r in rows] == [
        (0, 0, 1, 200, None), (1, 1, 0, 200, None), (2, 2, 0, 500, "HTTP 500: x")]
    assert unpack_seconds(rows[1]["chunk_s"]) == (0.02, 0.03, 0.05)
    assert unpack_counts(rows[1]["chunk_tokens"]) == (2, 1, 1)
    assert unpack_counts(rows[2]["chunk_tokens"]) == ()
    assert [r["in_flight"] for r in rows] == [0, 1, 0]  # migration 31
    cols = extras.fields([])
    # two measured requests: no p99 (it needs 100, the percentile rule)
    assert cols == {"serve_window_s": 2.0, "client_cpu_pct": pytest.approx(20.0),
                    "client_bound": 0}


@pytest.mark.parametrize(("lag", "cpu_s", "window_s", "bound"), [
    (LAG_BOUND_S / 2, 0.5, 2.0, 0), (LAG_BOUND_S * 3, 0.5, 2.0, 1), (0.0, 1.9, 2.0, 1),
    (0.0, 0.19, 0.2, 0)])  # a window under 1 s: its CPU is mostly start-up, not judged
def test_a_client_behind_its_schedule_is_client_bound(store: Store, lag: float, cpu_s: float,
                                                      window_s: float, bound: int) -> None:
    _, _, extras = _extras(store)
    extras.on_event(request(0, lag=0.5, warmup=True))  # a warm-up's lag never counts
    for i in range(1, 101):
        extras.on_event(request(i, lag=lag))
    extras.on_event({"event": "load", "window_s": window_s, "client_cpu_s": cpu_s})
    cols = extras.fields([])
    assert cols["dispatch_lag_p99_s"] == pytest.approx(lag)
    assert cols["client_bound"] == bound


def test_the_token_source_is_a_run_column_and_a_split_client_is_judged_per_process(
        store: Store) -> None:
    _, _, extras = _extras(store)
    extras.on_event(request(0))
    # 1.8 cores over two processes: 90 % each, not above the bound
    extras.on_event({"event": "load", "window_s": 2.0, "client_cpu_s": 3.6,
                     "token_source": "tokenize+usage", "client_processes": 2})
    cols = extras.fields([])
    assert (cols["token_source"], cols["client_bound"]) == ("tokenize+usage", 0)
    store.update_run(extras.run_id, cols)
    (row,) = store.db.query("select token_source from runs where id = ?", [extras.run_id])
    assert row["token_source"] == "tokenize+usage"


@pytest.mark.parametrize(("change", "says"), [
    ({"token_source": "guessed"}, "token_source 'guessed' is not one of estimated, "),
    ({"token_source": "usage+words"}, "token_source 'usage+words'"),
    ({"client_processes": 0}, "client_processes 0 is not an integer >= 1"),
])
def test_bad_load_events_are_refused(change: dict[str, Any], says: str) -> None:
    load = {"v": 1, "event": "load", "window_s": 2.0, "client_cpu_s": 0.4}
    assert EventChecker().problem(load) is None
    why = EventChecker().problem({**load, **change})
    assert why is not None and says in why, why


@pytest.mark.parametrize(("change", "says"), [
    ({"index": -1}, "index -1 is not an integer above -1"),
    ({"status": 700}, "not an HTTP status"),
    ({"dispatch_lag_s": -0.1}, "dispatch_lag_s -0.1 is not a finite number >= 0"),
    ({"chunk_tokens": [1]}, "not lists of the same length"),
    ({"chunk_s": [0.1, float("nan"), 0.2]}, "chunk_s.1 nan"),
    ({"error": 5}, "error is not text"),
    ({"warmup": "yes"}, "must be booleans"),
    ({"in_flight": -1}, "in_flight -1 is not an integer >= 0"),
    ({"in_flight": 1.5}, "in_flight 1.5 is not an integer"),
])
def test_bad_request_events_are_refused(change: dict[str, Any], says: str) -> None:
    why = EventChecker().problem({**request(0), **change})
    assert why is not None and why.startswith("request event: ") and says in why, why


def test_deleting_a_campaign_deletes_its_requests(store: Store) -> None:
    cid, job_id, extras = _extras(store)
    extras.on_event(request(0))
    extras.flush(final=True)
    store.finish_run(extras.run_id, job_id, RunStatus.OK, {"median_s": 0.05})
    store.set_campaign_status(cid, CampaignStatus.FINISHED)
    assert store.retention.delete_campaign(cid) == 1
    assert store.db.execute("select count(*) from serve_requests").fetchone()[0] == 0
