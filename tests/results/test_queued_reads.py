"""Results read the runs that exist and count the jobs never run per configuration
(``job_configs``, kept by triggers): same results as reading every job, at a cost that
does not follow the queue (issue 32)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import sqlite_utils

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.loader import parse
from dltop.results import export, identity
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.reads import campaign_rows
from dltop.store import Store, connect, memory_db

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


def test_same_results_as_reading_every_job(campaigns: Any) -> None:
    db, cid = _campaign(campaigns, 3)
    fast = config_results(db, cid)
    for name in ("insert", "delete", "update", "delete_template", "update_template"):
        db.execute(f"drop trigger job_configs_{name}")
    db.execute("drop table job_configs")  # its jobs are grouped in SQL
    assert _facts(config_results(db, cid)) == _facts(fast)
    # jobs stored without a config_key (before migration 5) are each their own group
    db.execute("update jobs set config_key = null where repeat >= 10")
    legacy = config_results(db, cid)
    assert [(r.batch_size, r.status, r.repeats) for r in legacy] == \
        [(r.batch_size, r.status, r.repeats) for r in fast]


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
        text = export.render(export.results_table(db, cid, "summary"), "md")
        db.conn.set_trace_callback(None)
        counts.append(len(seen))
        assert "| fcn-r | torch | 8 | cpu:1 | fp32 | 2/" in text
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
    every = identity.campaign_identities(db, cid)
    ran = identity.ran_identities(db, cid)
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
