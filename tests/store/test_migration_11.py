"""Migration 11: the queue counts its triggers keep, and the simulated flag of older runs."""

from __future__ import annotations

import random
from pathlib import Path

from dltop.store import Store, connect, memory_db

from .conftest import campaign, make_jobs
from .olddb import migrated_to

STATUSES = ("queued", "running", "ok", "crashed", "removed", "unsatisfiable", "cancelled")


def _counted(store: Store, cid: int) -> tuple[int, int]:
    """(done or running, total) counted from the jobs themselves."""
    row = next(store.db.query(
        "select sum(status not in ('queued', 'removed', 'unsatisfiable')) as done, "
        "sum(status not in ('removed', 'unsatisfiable')) as total from jobs "
        "where campaign_id = ?", [cid]))
    return int(row["done"] or 0), int(row["total"] or 0)


def test_progress_follows_every_kind_of_write() -> None:
    rng = random.Random(11)
    store = Store(memory_db())
    cids = [campaign(store, 5)[0] for _ in range(3)]
    for step in range(300):
        cid = rng.choice(cids)
        ids = [r["id"] for r in store.db.query("select id from jobs where campaign_id = ?",
                                               [cid])]
        what = rng.random()
        if what < 0.15 or not ids:
            store.edits.append_jobs(cid, make_jobs(rng.randint(1, 3)), "more.toml")
        elif what < 0.25:
            store.add_jobs(cid, make_jobs(2), [rng.choice(STATUSES)] * 2)
        elif what < 0.7:
            store.set_job_status(rng.choice(ids), rng.choice(STATUSES))
        elif what < 0.8:
            with store.transaction():  # several statements, and SQL the store never issues
                store.db.execute("update jobs set status = ? where campaign_id = ?",
                                 [rng.choice(STATUSES), cid])
        elif what < 0.9:
            store.db.execute("delete from jobs where id = ?", [rng.choice(ids)])
        else:
            store.queue.cancel_queued(cid)
        for c in cids:
            assert store.queue.progress(c) == _counted(store, c), f"step {step}"


def test_a_rolled_back_write_leaves_the_counts(tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    cid, ids = campaign(store, 4)
    try:
        with store.transaction():
            store.set_job_status(ids[0], "ok")
            store.add_jobs(cid, make_jobs(3))
            raise RuntimeError("killed midway")
    except RuntimeError:
        pass
    assert store.queue.progress(cid) == (0, 4) == _counted(store, cid)


def _version_10(path: Path) -> None:
    """A database left by dltop before migration 11: two campaigns, runs, samples."""
    db = migrated_to(path, 10)
    for cid in (1, 2):
        db.execute("insert into campaigns (id, name, status, created_at) "
                   "values (?, 'old', 'finished', 'x')", [cid])
    for k, status in enumerate(("ok", "ok", "queued", "removed", "running", "unsatisfiable")):
        db.execute("insert into jobs (campaign_id, position, status, framework, model, "
                   "batch_size, device) values (1, ?, ?, 'torch', 'fcn-r', 8, 'cpu:1')",
                   [k, status])
    db.execute("insert into jobs (campaign_id, position, status, framework, model, batch_size, "
               "device) values (2, 0, 'ok', 'torch', 'fcn-r', 8, 'gpu:1')")
    # run 1: a CPU run beside simulated GPUs (the flag was left 0); run 2: a GPU run
    # flagged as the engine did; run 3: real GPUs; run 4: no telemetry at all
    for rid, job, sim in ((1, 1, 0), (2, 7, 1), (3, 2, 0), (4, 2, None)):
        db.execute("insert into runs (id, job_id, campaign_id, attempt, status, "
                   "telemetry_simulated) values (?, ?, ?, 1, 'ok', ?)",
                   [rid, job, 2 if job == 7 else 1, sim])
    for rid, sim in ((1, 1), (1, 1), (2, 1), (3, 0)):
        db.execute("insert into gpu_samples (run_id, gpu_index, n, simulated) "
                   "values (?, 0, 1, ?)", [rid, sim])
    db.conn.commit()
    db.close()


def test_an_older_database_gets_its_counts_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_10(path)
    store = Store(connect(path))
    assert store.queue.progress(1) == (3, 4)
    assert store.queue.progress(2) == (1, 1)
    flags = {r["id"]: r["telemetry_simulated"]
             for r in store.db.query("select id, telemetry_simulated from runs")}
    assert flags == {1: 1, 2: 1, 3: 0, 4: None}
    cid = store.create_campaign("new", ["p.toml"], ["dltop"], "h", 1, None)
    store.add_jobs(cid, make_jobs(2))
    assert store.queue.progress(cid) == (0, 2)
