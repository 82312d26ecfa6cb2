"""Results read the runs that exist and count the jobs never run per configuration
(``job_configs``, kept by triggers): same results as reading every job, at a cost that
does not follow the queue (issue 32)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import sqlite_utils
from tests.store.olddb import migrated_to

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.loader import parse
from dltop.results import export, idread
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.reads import campaign_rows
from dltop.results.render import render
from dltop.store import Store, connect, memory_db
from dltop.store.migrations import apply
from dltop.store.reader import open_reader

PROFILE = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8, 16, 32, 64]\n'
           'devices = ["cpu:1"]\n')


def _campaign(campaigns: Any, queued_repeats: int) -> tuple[sqlite_utils.Database, int]:
    """b8: 2 ok runs; b16: one crashed run, then requeued; b32: removed, never run;
    b64: never run; then ``queued_repeats`` more repeats of each, queued."""
    db = memory_db()
    store = Store(db)
    base = parse(PROFILE, "q.toml", "q").jobs
    jobs = [*(dataclasses.replace(base[0], repeat=r) for r in range(2)), *base[1:],
            *(dataclasses.replace(j, repeat=10 + r) for r in range(queued_repeats)
              for j in base)]
    cid = store.create_campaign("q", ["q.toml"], ["dltop"], "h", 1, None)
    ids = store.add_jobs(cid, jobs)
    for job_id in ids[:2]:
        campaigns.add_run(db, cid, job_id, [0.1, 0.1, 0.12])
    campaigns.add_run(db, cid, ids[2], [], status=RunStatus.CRASHED)
    store.set_job_status(ids[2], JobStatus.QUEUED)  # a retry waits
    store.set_job_status(ids[3], JobStatus.REMOVED)
    return db, cid


def _facts(results: list[ConfigResult]) -> list[tuple[Any, ...]]:
    return [(r.batch_size, r.status, r.n_runs, r.repeats, r.config_key, r.median_s,
             r.identity.get("interpreter")) for r in results]


def test_configurations_count_their_jobs_never_run(campaigns: Any) -> None:
    db, cid = _campaign(campaigns, 3)
    got = {r.batch_size: r for r in config_results(db, cid)}
    assert (got[8].status, got[8].n_runs, got[8].repeats) == ("ok", 2, 5)
    assert (got[16].status, got[16].repeats) == ("crashed", 4)
    # the removed job is counted (read through the queue index); queued takes precedence
    assert (got[32].status, got[32].repeats) == ("queued", 4)
    assert (got[64].status, got[64].repeats) == ("queued", 4)
    assert got[8].incomplete and got[8].median_s is not None


def _as_migration_19_left_it(new: sqlite_utils.Database, path: Path) -> None:
    """``new``'s rows in a file at migration 19, before ``job_configs``: each job row
    whole (its spec and key, not a template's), the tables' columns of that version."""
    old = migrated_to(path, 19)
    for table in ("campaigns", "jobs", "runs", "iterations", "environment"):
        cols = [c.name for c in old[table].columns]
        rows = new.query(f"select * from {table}") if table != "jobs" else new.query(
            "select j.*, s.config_key as key, s.spec_json as spec from jobs j "
            "join job_specs s on s.job_id = j.id")
        old[table].insert_all(({c: r["key" if c == "config_key" else "spec" if c == "spec_json"
                                   else c] for c in cols} for r in rows) if table == "jobs"
                              else ({c: r.get(c) for c in cols} for r in rows))
    old.conn.commit()
    old.close()


def test_an_older_database_reads_as_a_new_one(tmp_path: Path, campaigns: Any) -> None:
    new, cid = _campaign(campaigns, 3)
    fast = _facts(config_results(new, cid))
    path = tmp_path / "old.db"
    _as_migration_19_left_it(new, path)
    reader = open_reader(path)  # read-only: job_configs is a view grouping the jobs
    try:
        assert [v for (v,) in reader.execute("select version from schema_migrations")] == \
            list(range(1, 20))
        assert _facts(config_results(reader, cid)) == fast  # type: ignore[arg-type]
    finally:
        reader.close()
    # a job an older dltop stored without a config_key is counted once the file is opened
    # for writing (migrations 20 and 32), and no job row is read for it after that
    legacy = sqlite_utils.Database(path)
    legacy.execute("update jobs set config_key = null where repeat >= 10")
    legacy.conn.commit()
    legacy.close()
    db = connect(path)
    assert db.execute("select sum(jobs) from job_configs").fetchone()[0] == \
        db.execute("select count(*) from jobs").fetchone()[0] == 17
    assert db.execute("select count(*) from jobs where config_key is null").fetchone()[0] == 0
    assert _facts(config_results(db, cid)) == fast


def test_migration_32_counts_a_campaign_job_configs_missed(tmp_path: Path,
                                                          campaigns: Any) -> None:
    new, cid = _campaign(campaigns, 3)
    fast = _facts(config_results(new, cid))
    path = tmp_path / "old.db"
    _as_migration_19_left_it(new, path)
    db = sqlite_utils.Database(path)
    apply(db, upto=31)  # 20..31: job_configs as migration 20 counted it
    # a job row job_configs does not count (SQL by hand)
    db.execute("delete from job_configs where config_key = (select config_key from jobs "
               "where id = 1)")
    db.conn.commit()
    assert db.execute("select sum(jobs) from job_configs").fetchone()[0] == 17 - 5
    db.close()
    db = connect(path)
    assert db.execute("select sum(jobs) from job_configs").fetchone()[0] == 17
    assert _facts(config_results(db, cid)) == fast


def test_reads_follow_the_configurations_not_the_queue(campaigns: Any) -> None:
    small, cs = _campaign(campaigns, 1)
    big, cb = _campaign(campaigns, 500)
    # one row per job with a run (3), one per configuration and status never run (the
    # removed b32, and the queued jobs of each of the 4 configurations)
    assert len(campaign_rows(big, cb)) == len(campaign_rows(small, cs)) == 3 + 1 + 4
    counts = []
    for db, cid in ((small, cs), (big, cb)):
        seen: list[str] = []
        db.conn.set_trace_callback(seen.append)
        text = render(export.results_table(db, cid, "summary"), "md")
        db.conn.set_trace_callback(None)
        counts.append(len(seen))
        assert "| fcn-r | torch | 8 | cpu:1 | 2/" in text
    assert counts[0] == counts[1]


def test_job_configs_follow_inserts_deletes_and_key_changes(campaigns: Any) -> None:
    db, cid = _campaign(campaigns, 2)

    def counted() -> dict[str, int]:
        return {r["config_key"]: r["jobs"] for r in db.query(
            "select config_key, jobs from job_configs where campaign_id = ?", [cid])}

    def truth() -> dict[str, int]:
        return {r["config_key"]: r["n"] for r in db.query(
            "select config_key, count(*) as n from job_specs where campaign_id = ? "
            "group by config_key", [cid])}

    assert counted() == truth() and sum(truth().values()) == 13
    db.execute("delete from jobs where id = (select max(id) from jobs)")
    assert counted() == truth()
    db.execute("update jobs set config_key = 'moved' where id = (select max(id) from jobs)")
    assert counted() == truth() and counted()["moved"] == 1
    db.execute("delete from runs")
    db.execute("delete from iterations")
    db.execute("delete from jobs where campaign_id = ?", [cid])
    assert counted() == {}


def test_ran_identities_match_every_job_identities(campaigns: Any) -> None:
    db, cid = _campaign(campaigns, 2)
    every = idread.campaign_identities(db, cid)
    ran = idread.ran_identities(db, cid)
    assert sorted(ran) == sorted(r["job_id"] for r in db.query(
        "select distinct job_id from runs"))
    assert all(ran[j] == every[j] for j in ran)


def test_finished_campaigns_results_are_kept_until_a_write(tmp_path: Path,
                                                           campaigns: Any) -> None:
    path = tmp_path / "c.db"
    db = connect(path)
    cid, jobs = campaigns.create(db, campaigns.profile("k", ["cpu:1"], repeats=2), "k")
    campaigns.add_run(db, cid, jobs[0][1], [0.1, 0.1, 0.1])
    running = config_results(db, cid)
    assert config_results(db, cid) is not running  # an open campaign: read each time
    db.execute("update campaigns set status = 'finished' where id = ?", [cid])
    first = config_results(db, cid)
    again = config_results(connect(path, create=False), cid)
    assert again == first and again is not first  # kept, handed out as a new list
    assert again[0] is first[0]
    campaigns.add_run(db, cid, jobs[1][1], [0.2, 0.2, 0.2])  # a new run: read again
    (fresh,) = config_results(db, cid)
    assert fresh.n_runs == 2 and fresh is not first[0]
