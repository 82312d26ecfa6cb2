"""One owner per campaign (issue 38, item 1): a store fenced on an owner generation that
another engine has since taken over writes nothing, whatever it writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop.store import Store, connect
from dltop.store.fence import EXIT_OWNERSHIP_LOST, Fence, OwnershipLost
from dltop.store.guard import StorageError
from dltop.store.queue import RunProcess
from dltop.telemetry.windows import Batch, HostWindow

from .conftest import make_jobs
from .olddb import migrated_to


def dump(store: Store) -> list[str]:
    """Every row of every table, as SQL: what "unchanged" is compared on."""
    return list(store.db.conn.iterdump())


def owned(path: Path) -> tuple[Store, int, list[int], int]:
    """Engine A's store (host login1, pid 100) owning a new campaign of 3 jobs, the first
    one running: (store, campaign, jobs, run)."""
    a = Store(connect(path))
    cid = a.create_campaign("c", ["p.toml"], ["dltop", "run"], "login1", 100, 5.0)
    a.fence(cid)
    jobs = a.add_jobs(cid, make_jobs(3))
    run = a.start_run(jobs[0], cid, 1, "run.log", 8)
    a.add_iterations(run, [{"idx": 0, "seconds": 0.1, "samples": 8, "warmup": 1}])
    return a, cid, jobs, run


def take_over(path: Path, cid: int) -> Store:
    """Engine B (host login2, pid 4242) claims the campaign A seemed to have left."""
    b = Store(connect(path, create=False))
    found = b.db.execute("select owner_generation from campaigns where id = ?", [cid])
    assert found.fetchone()[0] == 1
    assert b.queue.claim(cid, 4242, 7.0, (100, 5.0), "login2", 1)
    assert b.owner == Fence(cid, 2)
    return b


def stale_writes(a: Store, cid: int, jobs: list[int], run: int) -> dict[str, Callable[[], Any]]:
    """Every kind of write an engine makes, from A's store."""
    q = a.queue
    return {
        "iterations": lambda: a.add_iterations(run, [{"idx": 1, "seconds": 0.1, "samples": 8,
                                                      "warmup": 0}]),
        "evals": lambda: a.add_evals(run, [{"idx": 0, "accuracy": 0.5}]),
        "generations": lambda: a.add_generations(run, [{"idx": 0, "ttft_s": 0.1}]),
        "profile": lambda: a.set_profile(run, {"profile_steps": 3}, [{"name": "mm"}]),
        "update_run": lambda: a.update_run(run, {"pid": 1234}),
        "finish_run": lambda: a.finish_run(run, jobs[0], "ok", {"median_s": 0.1}),
        "start_run": lambda: a.start_run(jobs[1], cid, 1, "", 8),
        "job_status": lambda: a.set_job_status(jobs[1], "running"),
        "environment": lambda: a.record_environment(run, {"hostname": "login1"}),
        "samples": lambda: a.telemetry.write_batch(Batch((), (HostWindow(
            run, 1.0, 5, 10.0, 50.0, 2**30, 0, 99.0, 2**28),))),
        "campaign_status": lambda: a.set_campaign_status(cid, "finished"),
        "fail_campaign": lambda: a.fail_campaign(cid, "why"),
        "heartbeat": lambda: q.heartbeat(cid, 100, "login1"),
        "waiting": lambda: q.set_waiting(cid, "gpu 0"),
        "finish_if_drained": lambda: q.finish_if_drained(cid, "finished", "now"),
        "cancel_queued": lambda: q.cancel_queued(cid),
        "requeue": lambda: q.requeue_running_jobs(cid),
        "lost": lambda: q.mark_lost_and_requeue(RunProcess(run, jobs[0], None, None, None)),
    }


def test_a_stale_generation_writes_nothing(tmp_path: Path) -> None:
    a, cid, jobs, run = owned(tmp_path / "d.db")
    b = take_over(tmp_path / "d.db", cid)
    before = dump(b)
    for what, write in stale_writes(a, cid, jobs, run).items():
        with pytest.raises(OwnershipLost) as lost:
            write()
        assert (lost.value.host, lost.value.pid, lost.value.now) == ("login2", 4242, 2), what
        assert dump(b) == before, f"{what}: the refused write changed the database"
    msg = str(lost.value)
    assert "taken over by the engine on host login2 (pid 4242), owner generation 2" in msg
    assert "\n" not in msg
    assert isinstance(lost.value, StorageError) and lost.value.exit_code == EXIT_OWNERSHIP_LOST
    assert not a.db.conn.in_transaction  # rolled back: A's connection holds no lock
    # the new owner writes as before
    b.queue.mark_lost_and_requeue(RunProcess(run, jobs[0], None, None, None))
    assert b.queue.heartbeat(cid, 4242, "login2")
    status = [r[0] for r in b.db.execute("select status from runs where id = ?", [run])]
    assert status == ["crashed"]


def test_the_owner_writes_and_a_takeover_is_one_compare_and_set(tmp_path: Path) -> None:
    a, cid, jobs, run = owned(tmp_path / "d.db")
    for write in stale_writes(a, cid, jobs, run).values():
        write()  # generation 1 is still the campaign's: every write goes through
    assert a.db.execute("select owner_generation from campaigns").fetchone()[0] == 1
    b = take_over(tmp_path / "d.db", cid)
    c = Store(connect(tmp_path / "d.db", create=False))
    before = dump(c)
    # a third engine that read generation 1 (or the pid B replaced) loses, writing nothing
    assert not c.queue.claim(cid, 5151, 9.0, (4242, 7.0), "login3", 1)
    assert not c.queue.claim(cid, 5151, 9.0, (100, 5.0), "login3")
    assert c.owner is None and dump(c) == before
    # B itself taken over in turn: its fence refuses, as A's did
    assert c.queue.claim(cid, 5151, 9.0, (4242, 7.0), "login3", 2)
    with pytest.raises(OwnershipLost, match="host login3 \\(pid 5151\\), owner generation 3"):
        b.update_run(run, {"pid": 1})


def test_a_fenced_heartbeat_that_updates_no_row_is_a_lost_campaign(tmp_path: Path) -> None:
    a, cid, _, _ = owned(tmp_path / "d.db")
    assert a.queue.heartbeat(cid, 100, "login1")
    # the row no longer names this engine (a claim by an older dltop: no generation bump)
    a.db.execute("update campaigns set engine_pid = 4242, engine_host = 'login2'")
    a.db.conn.commit()
    with pytest.raises(OwnershipLost, match="host login2 \\(pid 4242\\)"):
        a.queue.heartbeat(cid, 100, "login1")
    # an unfenced store (a test's, a viewer's) is told by the return value only
    other = Store(connect(tmp_path / "d.db", create=False))
    assert not other.queue.heartbeat(cid, 100, "login1")


def test_a_deleted_campaign_fences_too(tmp_path: Path) -> None:
    a, cid, _, run = owned(tmp_path / "d.db")
    a.fence(cid + 1)  # a campaign not in the database
    with pytest.raises(OwnershipLost, match=f"campaign {cid + 1} is no longer"):
        a.update_run(run, {"pid": 1})


def test_migration_24_gives_older_campaigns_generation_0(tmp_path: Path) -> None:
    old = migrated_to(tmp_path / "d.db", 23)
    old.execute("insert into campaigns (name, status, engine_pid, created_at) "
                "values ('old', 'running', 1, '2026-11-01T00:00:00Z')")
    old.conn.commit()
    old.conn.close()
    store = Store(connect(tmp_path / "d.db"))
    (camp,) = store.queue.open_campaigns()
    assert camp.owner_generation == 0
    assert store.queue.claim(camp.id, 2, 1.0, (1, None), "h", 0)
    assert store.owner == Fence(camp.id, 1)
