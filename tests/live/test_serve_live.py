"""A running serve run's figures so far (:mod:`dltop.live.serve_live`) on a real
database: read incrementally, they equal a full reading of the rows at every step; a
database whose rows were replaced under the same run id is read again; the sample
rule holds the p99s back; a run of another mode has none."""

from __future__ import annotations

from typing import Any

import pytest

from dltop.live import serve_live as live
from dltop.profiles.loader import parse
from dltop.results.convergence import percentile
from dltop.results.serving import serve_requests_of
from dltop.store import Store, memory_db
from dltop.store.generations import pack_seconds, unpack_seconds
from dltop.store.serving import pack_counts

SERVE = ('[defaults]\nframeworks = ["openai"]\nmode = "serve"\nendpoint = "http://h:1/v1"\n'
         '[[matrix]]\nmodels = ["m"]\nrequest_rate = {rate}\n')


def _run(store: Store, text: str) -> int:
    jobs = parse(text, "p.toml", "p").jobs
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    return store.start_run(store.add_jobs(cid, jobs)[0], cid, 1, "", 1)


def _add(store: Store, run_id: int, first: int, n: int, *, warmup: bool = False,
         scale: float = 1.0) -> None:
    """``n`` requests from index ``first``; every fifth one fails (HTTP 500)."""
    reqs, gens = [], []
    for i in range(first, first + n):
        bad = i % 5 == 4
        ttft = scale * (0.01 + 0.001 * (i % 7))
        itl = [scale * (0.002 + 0.0001 * ((i + k) % 3)) for k in range(3)]
        reqs.append({"idx": i, "request": i, "warmup": int(warmup), "scheduled_s": 0.1 * i,
                     "dispatch_lag_s": 0.001, "slot_wait_s": 0.0, "ttft_s": None if bad
                     else ttft, "e2e_s": 0.05, "status": 500 if bad else 200,
                     "error": f"HTTP 500: {i}" if bad else None,
                     "output_tokens": 0 if bad else 4, "tokens_estimated": 0,
                     "chunk_s": pack_seconds([] if bad else [ttft]),
                     "chunk_tokens": pack_counts([] if bad else [4]), "in_flight": i % 3,
                     "resent": int(i % 7 == 3), "resend_s": 0.5 if i % 7 == 3 else 0.0})
        if not bad:
            gens.append({"idx": i, "warmup": int(warmup), "ttft_s": ttft, "e2e_s": 0.05,
                         "prompt_tokens": 8, "new_tokens": 4, "batch": 1,
                         "itl_s": pack_seconds(itl)})
    store.add_serve_requests(run_id, reqs)
    store.add_generations(run_id, gens)


def _full(store: Store, run_id: int) -> dict[str, Any]:
    """The figures from every stored row at once (what an incremental read must equal)."""
    rows = list(store.db.query("select * from serve_requests where run_id = ? order by idx",
                               [run_id]))
    measured = [r for r in rows if not r["warmup"]]
    ok = [r for r in measured if r["error"] is None]
    gens = list(store.db.query("select * from generations where run_id = ? and warmup = 0",
                               [run_id]))
    return {"ok": len(ok), "failed": len(measured) - len(ok),
            "warmup": len(rows) - len(measured), "in_flight": rows[-1]["in_flight"],
            "window": max(r["scheduled_s"] + r["dispatch_lag_s"] + r["resend_s"]
                          + r["e2e_s"] for r in measured),
            "tokens": sum(r["output_tokens"] for r in ok),
            "ttft": sorted(g["ttft_s"] for g in gens),
            "itl": sorted(x for g in gens for x in unpack_seconds(g["itl_s"]))}


def _check(got: live.ServeLive | None, want: dict[str, Any]) -> None:
    assert got is not None
    assert (got.ok, got.failed, got.warmup_done, got.in_flight, got.output_tokens) == (
        want["ok"], want["failed"], want["warmup"], want["in_flight"], want["tokens"])
    assert got.window_s == want["window"]
    # the live rate is over the load's clock read now: the newest end, plus what the
    # reader's clock ran since a read that saw no newer end (a hung server's rate falls)
    assert got.now_s is not None and -1e-6 <= got.now_s - want["window"] < 5.0
    assert want["window"] < live.RATE_WINDOW_S and got.recent_ok == want["ok"]
    assert got.achieved_rate_per_s == want["ok"] / got.now_s
    assert list(got.ttft_s) == want["ttft"] and list(got.itl_s) == want["itl"]
    assert got.ttft.p50_s == percentile(want["ttft"], 50) and got.ttft.n == len(want["ttft"])


def test_an_incremental_read_equals_a_full_one_at_every_step() -> None:
    store = Store(memory_db())
    run_id = _run(store, SERVE.format(rate=4))
    got = live.serve_live(store.db, run_id)
    assert got is not None and (got.ok, got.failed, got.in_flight, got.window_s) == (
        0, 0, None, None)  # a serve run before its first request ended
    assert got.asked_rate_per_s == 4.0 and got.ttft == live.Quantiles(None, None, 0)
    _add(store, run_id, 0, 2, warmup=True)
    _add(store, run_id, 2, 10)
    first = live.serve_live(store.db, run_id)
    _check(first, _full(store, run_id))
    assert first is not None and first.last_error == "HTTP 500: 9"
    # 8 ok: a p50, no p99 (100 needed); 24 ITLs: still no p99
    assert first.ttft.p99_s is None and first.itl.p99_s is None and first.itl.n == 24
    _add(store, run_id, 12, 60)
    second = live.serve_live(store.db, run_id)
    _check(second, _full(store, run_id))
    assert second is not None and second.itl.n >= 100 and second.itl.p99_s == percentile(
        list(second.itl_s), 99)
    assert first.itl.n == 24  # what was read before is not changed by the next read


def test_rows_replaced_under_the_same_run_are_read_again() -> None:
    store = Store(memory_db())
    run_id = _run(store, SERVE.format(rate='"inf"'))
    _add(store, run_id, 0, 10)
    _check(live.serve_live(store.db, run_id), _full(store, run_id))
    with store.db.conn:
        store.db.execute("delete from serve_requests")
        store.db.execute("delete from generations")
    _add(store, run_id, 0, 6, scale=3.0)  # fewer rows, other times
    again = live.serve_live(store.db, run_id)
    _check(again, _full(store, run_id))
    assert again is not None and again.asked_rate_per_s is None  # "inf"


def test_a_request_sent_again_is_sent_when_its_answered_send_left() -> None:
    store = Store(memory_db())
    run_id = _run(store, SERVE.format(rate=4))
    _add(store, run_id, 0, 5)
    reqs = {q.idx: q for q in serve_requests_of(store.db, [run_id])[run_id]}
    # request 3 went twice: its first send's 0.5 s is neither lag nor its latency
    assert reqs[3].sent_s == pytest.approx(0.801) and reqs[2].sent_s == pytest.approx(0.201)
    got = live.serve_live(store.db, run_id)
    assert got is not None and got.window_s == pytest.approx(0.851)


def test_a_run_of_another_mode_has_no_serve_figures() -> None:
    store = Store(memory_db())
    run_id = _run(store, '[defaults]\n[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]'
                         '\nbatch_sizes = [2]\ndevices = ["cpu:1"]\n')
    assert live.serve_live(store.db, run_id) is None
