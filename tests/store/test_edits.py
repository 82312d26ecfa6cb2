"""A viewer's queue edits, against an in-memory database (and two connections for races)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dltop.store import Store
from dltop.store.edit import EditResult

from .conftest import campaign, make_jobs, statuses


def order(store: Store, cid: int) -> list[int]:
    """Job ids of the campaign's queued jobs in queue order."""
    return [j for j, _, _ in store.queue.queued_devices(cid)]


def test_move_swaps_queued_neighbours_only(store: Store) -> None:
    cid, ids = campaign(store, 4)
    store.set_job_status(ids[0], "running")
    assert store.edits.move_job(ids[3], -1) == EditResult(1, False)
    assert order(store, cid) == [ids[1], ids[3], ids[2]]
    assert store.edits.move_job(ids[1], +1) == EditResult(1, False)
    assert order(store, cid) == [ids[3], ids[1], ids[2]]
    assert store.edits.move_job(ids[3], -1).changed == 0  # first queued: over the running job
    assert store.edits.move_job(ids[2], +1).changed == 0  # last
    assert store.edits.move_job(ids[0], +1).changed == 0  # running jobs do not move
    assert store.edits.move_job(999, +1).changed == 0
    assert sorted(p for p, _ in statuses(store, cid)) == [0, 1, 2, 3]  # positions stay a set


def test_remove_takes_only_queued_jobs(store: Store) -> None:
    cid, ids = campaign(store, 2)
    store.set_job_status(ids[0], "running")
    assert store.edits.remove_job(ids[0]).changed == 0
    assert store.edits.remove_job(ids[1]) == EditResult(1, False)
    assert store.edits.remove_job(ids[1]).changed == 0
    assert statuses(store, cid) == [(0, "running"), (1, "removed")]


def test_retry_failed_requeues_retryable_jobs_at_the_tail(store: Store) -> None:
    cid, ids = campaign(store, 6)
    for job, status in zip(ids, ["crashed", "ok", "oom", "timeout", "cancelled"], strict=False):
        store.finish_run(store.start_run(job, cid, 1, "", 8), job, status, {})
    # ids[5] is still queued, so the campaign has not finished: no engine needed.
    assert store.edits.retry_failed(cid) == EditResult(3, False)
    assert [(r["id"], r["position"]) for r in store.db.query(
        "select id, position from jobs where status = 'queued' order by position")] == [
        (ids[5], 5), (ids[0], 6), (ids[3], 7), (ids[4], 8)]
    assert store.edits.retry_failed(cid) == EditResult(0, False)
    assert store.queue.next_attempt(ids[0]) == 2  # the earlier run stays stored


def test_retry_failed_reopens_a_finished_campaign(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    store.finish_run(store.start_run(job, cid, 1, "", 8), job, "crashed", {})
    store.set_control(cid, "cancel")
    assert store.queue.finish_if_drained(cid, "cancelled", "t")
    assert store.edits.retry_failed(cid) == EditResult(1, True)
    row = store.db.table("campaigns").get(cid)
    assert (row["status"], row["finished_at"], row["control"]) == ("queued", None, None)


def test_append_jobs_queues_at_the_tail_and_names_the_profile_once(store: Store) -> None:
    cid, ids = campaign(store, 2)
    store.edits.remove_job(ids[1])
    assert store.edits.append_jobs(cid, make_jobs(2, "more"), "more.toml") == EditResult(2, False)
    assert statuses(store, cid) == [(0, "queued"), (1, "removed"), (2, "queued"),
                                    (3, "queued")]
    assert [s.profile for _, _, s in store.queue.queued_jobs(cid)] == ["p", "more", "more"]
    store.edits.append_jobs(cid, make_jobs(1, "more"), "more.toml")
    assert store.db.table("campaigns").get(cid)["profiles"] == '["p.toml", "more.toml"]'
    assert store.edits.append_jobs(cid, [], "none.toml").changed == 0


def test_append_jobs_reopens_a_finished_campaign(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    store.finish_run(store.start_run(job, cid, 1, "", 8), job, "ok", {})
    assert store.queue.finish_if_drained(cid, "finished", "t")
    assert store.edits.append_jobs(cid, make_jobs(1), "p.toml") == EditResult(1, True)
    row = store.db.table("campaigns").get(cid)
    assert (row["status"], row["finished_at"]) == ("queued", None)
    assert not store.queue.finish_if_drained(cid, "finished", "t")  # the new job is queued


def test_cancel_run_leaves_a_request_for_the_engine(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    assert store.edits.cancel_run(cid, run) == EditResult(1, False)
    assert store.db.table("campaigns").get(cid)["cancel_run_id"] == run
    assert store.edits.cancel_run(999, run).changed == 0


def test_cancel_run_of_a_run_that_ended_asks_nothing(store: Store) -> None:
    # The engine cancels by run id: a request for an ended run must not stay behind
    # (nor, in the viewer, read as if it had stopped the run that started next).
    cid, (job, nxt) = campaign(store, 2)
    run = store.start_run(job, cid, 1, "", 8)
    store.finish_run(run, job, "ok", {})
    store.start_run(nxt, cid, 1, "", 8)
    assert store.edits.cancel_run(cid, run).changed == 0
    assert store.db.table("campaigns").get(cid)["cancel_run_id"] is None
    assert store.edits.cancel_run(cid, 12345).changed == 0  # no such run


def test_finish_if_drained_waits_for_an_append_in_progress(
        file_stores: Callable[[], Store]) -> None:
    # Engine and viewer are two connections. The viewer's append holds the write lock;
    # the engine's closing statement waits for it, then finds the job and leaves the
    # campaign open, so the appended job is run by this engine, never stranded.
    engine, viewer = file_stores(), file_stores()
    cid, (job,) = campaign(engine, 1)
    engine.finish_run(engine.start_run(job, cid, 1, "", 8), job, "ok", {})
    closed: list[bool] = []
    closer = threading.Thread(
        target=lambda: closed.append(file_stores().queue.finish_if_drained(cid, "finished", "t")))
    with viewer.transaction():
        res = viewer.edits.append_jobs(cid, make_jobs(1), "p.toml")
        closer.start()
        closer.join(timeout=0.3)
        assert closer.is_alive() and not closed  # blocked behind the viewer's transaction
    closer.join(timeout=30)
    assert closed == [False] and res == EditResult(1, False)
    assert engine.db.table("campaigns").get(cid)["status"] == "queued"


def test_append_after_the_engine_closed_the_campaign_asks_for_an_engine(
        file_stores: Callable[[], Store]) -> None:
    engine, viewer = file_stores(), file_stores()
    cid, (job,) = campaign(engine, 1)
    engine.finish_run(engine.start_run(job, cid, 1, "", 8), job, "ok", {})
    assert engine.queue.finish_if_drained(cid, "finished", "t")
    assert viewer.edits.append_jobs(cid, make_jobs(1), "p.toml").needs_engine
