"""The engine's queue reads and writes, against an in-memory database."""

from __future__ import annotations

import pytest

from dltop.store import Store
from dltop.store.fence import OwnershipLost, set_fence
from dltop.store.queue import LOST_MESSAGE, RunProcess
from dltop.store.read.campaigns import OpenCampaign

from .conftest import campaign, statuses


def test_queued_jobs_devices_and_spec_follow_queue_order(store: Store) -> None:
    cid, ids = campaign(store, 3)
    store.set_job_status(ids[0], "running")
    assert [(j, p) for j, p, _ in store.queue.queued_jobs(cid)] == [(ids[1], 1), (ids[2], 2)]
    assert [s.batch_size for _, _, s in store.queue.queued_jobs(cid)] == [2, 3]
    assert [(j, d.label) for j, _, d in store.queue.queued_devices(cid)] == [
        (ids[1], "cpu:1"), (ids[2], "cpu:1")]
    spec = store.queue.queued_spec(ids[2])
    assert spec is not None and spec.batch_size == 3
    assert store.queue.queued_spec(ids[0]) is None  # started: no longer the queue's


def test_progress_counts_done_and_running_but_not_removed_or_unsatisfiable(
        store: Store) -> None:
    cid, ids = campaign(store, 5)
    assert store.queue.progress(cid) == (0, 5)
    store.set_job_status(ids[0], "ok")
    store.set_job_status(ids[1], "running")
    store.set_job_status(ids[2], "removed")
    store.set_job_status(ids[3], "unsatisfiable")
    assert store.queue.progress(cid) == (2, 3)


def test_next_attempt_counts_the_jobs_runs(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    assert store.queue.next_attempt(job) == 1
    store.finish_run(store.start_run(job, cid, 1, "", 8), job, "crashed", {})
    assert store.queue.next_attempt(job) == 2


def test_open_campaigns_claim_control_and_packs(store: Store) -> None:
    a, _ = campaign(store, 1)
    b, _ = campaign(store, 1, pack=True)
    store.set_campaign_status(a, "finished")
    store.set_campaign_status(b, "paused")
    (open_b,) = store.queue.open_campaigns()
    assert open_b == OpenCampaign(b, "c", "paused", 1, None, None, "host",
                                  open_b.engine_heartbeat_s, 1, pack=True)
    store.set_control(b, "pause")
    assert store.queue.control(b) == "pause" and store.queue.control(a) is None
    assert not store.queue.claim(b, 4242, 12.5, (2, None))  # not the owner it found
    assert store.queue.control(b) == "pause"  # the refused claim wrote nothing
    assert store.queue.claim(b, 4242, 12.5, (1, None), "login2")
    (open_b,) = store.queue.open_campaigns()
    assert open_b == OpenCampaign(b, "c", "paused", 4242, 12.5, None, "login2",
                                  open_b.engine_heartbeat_s, 2, pack=True)  # its generation
    assert store.queue.control(b) is None  # a new engine starts with no stale request
    assert not store.queue.claim(b, 4343, 1.0, (1, None))  # the second claimer loses
    assert store.queue.packs(b) and not store.queue.packs(a)
    assert store.queue.control(999) is None and not store.queue.packs(999)


def test_waiting_for_devices_is_open_and_goes_back_to_running(store: Store) -> None:
    a, _ = campaign(store, 1)
    store.queue.set_waiting(a, "cpu-0 held by campaign 9")  # queued: not yet running
    assert store.queue.open_campaigns()[0].status == "queued"
    store.set_campaign_status(a, "running")
    store.queue.set_waiting(a, "cpu-0 held by campaign 9")
    (c,) = store.queue.open_campaigns()
    assert (c.status, c.waiting_for) == ("waiting", "cpu-0 held by campaign 9")
    store.queue.set_waiting(a, None)
    (c,) = store.queue.open_campaigns()
    assert (c.status, c.waiting_for) == ("running", None)
    store.set_campaign_status(a, "paused")
    store.queue.set_waiting(a, None)  # never overwrites a pause
    assert store.queue.open_campaigns()[0].status == "paused"


def test_mark_lost_and_requeue_closes_the_run_and_queues_its_job(store: Store) -> None:
    cid, ids = campaign(store, 2)
    run = store.start_run(ids[0], cid, 1, "", 8)
    store.update_run(run, {"pid": 10, "pgid": 10, "proc_start_time": 1.5})
    store.set_job_status(ids[1], "running")  # a packed job whose run row never came
    (lost,) = store.queue.running_runs(cid)
    assert lost == RunProcess(run, ids[0], 10, 10, 1.5)
    store.queue.mark_lost_and_requeue(lost)
    row = store.db.table("runs").get(run)
    assert (row["status"], row["error_kind"], row["error_message"]) == (
        "crashed", "engine_lost", LOST_MESSAGE)
    assert row["finished_at"]
    assert store.queue.running_runs(cid) == []
    assert store.queue.requeue_running_jobs(cid) == 1
    assert statuses(store, cid) == [(0, "queued"), (1, "queued")]


def test_cancel_queued_and_finish_if_drained(store: Store) -> None:
    cid, ids = campaign(store, 3)
    store.set_job_status(ids[0], "ok")
    assert not store.queue.finish_if_drained(cid, "finished", "t")  # two still queued
    assert store.queue.cancel_queued(cid) == 2
    assert statuses(store, cid) == [(0, "ok"), (1, "cancelled"), (2, "cancelled")]
    assert store.queue.finish_if_drained(cid, "cancelled", "t")
    row = store.db.table("campaigns").get(cid)
    assert (row["status"], row["finished_at"]) == ("cancelled", "t")


def test_take_cancel_run_reads_the_request_once(store: Store) -> None:
    cid, (job,) = campaign(store, 1)
    run = store.start_run(job, cid, 1, "", 8)
    assert store.queue.take_cancel_run(cid) is None
    assert store.edits.cancel_run(cid, run).changed == 1
    assert store.queue.take_cancel_run(cid) == run
    assert store.queue.take_cancel_run(cid) is None
    assert store.queue.take_cancel_run(999) is None


def test_the_heartbeat_is_the_owner_s_only(store: Store) -> None:
    """The claim records the new engine's host and a first heartbeat; only the owner
    (pid on its host) refreshes it, so a replaced engine cannot make a new one look dead
    or itself alive."""
    cid, _ = campaign(store, 1)

    def beat() -> float:
        (c,) = store.queue.open_campaigns()
        assert c.engine_heartbeat_s is not None
        return c.engine_heartbeat_s

    store.db.execute("update campaigns set engine_heartbeat_s = 100.0")
    assert not store.queue.heartbeat(cid, 1, "elsewhere")  # same pid, another host
    assert not store.queue.heartbeat(cid, 2, "host")
    assert beat() == 100.0
    assert store.queue.heartbeat(cid, 1, "host")
    assert beat() > 1e9  # now, epoch seconds
    assert store.queue.claim(cid, 7, 1.0, (1, None), "login2")
    with pytest.raises(OwnershipLost):  # fenced (the claim's store): the beat is refused
        store.queue.heartbeat(cid, 1, "host")
    set_fence(store.db, None)
    assert not store.queue.heartbeat(cid, 1, "host")  # the old engine no longer owns it
    (c,) = store.queue.open_campaigns()
    assert (c.engine_pid, c.engine_host) == (7, "login2")
