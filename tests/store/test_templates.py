"""Job specs stored once per configuration (migration 23): every reader still gets each
job's whole spec, the configuration counts stay true, and older rows read as before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import sqlite_utils
from tests.store.conftest import campaign, make_jobs

from dltop.catalog import CampaignStatus, JobStatus
from dltop.profiles.joblist import JobList
from dltop.profiles.jobspec import JobSpec
from dltop.store import Store, connect
from dltop.store.migrations import apply
from dltop.store.reader import open_reader
from dltop.store.rows import job_row


def _specs(db: sqlite_utils.Database, cid: int) -> list[JobSpec]:
    return [JobSpec.from_json_dict(json.loads(r["spec_json"])) for r in db.query(
        "select s.spec_json from jobs j join job_specs s on s.job_id = j.id "
        "where j.campaign_id = ? order by j.position", [cid])]


def _counts(db: sqlite_utils.Database, cid: int) -> dict[str, int]:
    return {r["config_key"]: r["jobs"] for r in db.query(
        "select config_key, jobs from job_configs where campaign_id = ?", [cid])}


def test_repeats_share_one_stored_spec_and_read_back_whole(store: Store) -> None:
    jobs = JobList([(make_jobs(3), 4)])
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "host", 1, None)
    ids = store.add_jobs(cid, jobs)
    assert store.db.execute("select count(*) from job_templates").fetchone()[0] == 3
    assert store.db.execute("select count(*) from jobs where spec_json is not null "
                            "or config_key is not null").fetchone()[0] == 0
    assert _specs(store.db, cid) == list(jobs)
    assert store.queue.queued_spec(ids[7]) == jobs[7] and jobs[7].repeat == 2
    assert _counts(store.db, cid) == {j.config_key: 4 for j in make_jobs(3)}


def test_a_setting_outside_the_identity_keeps_its_own_template(store: Store) -> None:
    cid, _ = campaign(store, 2)
    later = [dataclasses.replace(j, timeout_s=99.0) for j in make_jobs(2, "other")]
    store.edits.append_jobs(cid, later, "other.toml")
    store.edits.append_jobs(cid, make_jobs(2), "p.toml")  # reuses the first templates
    assert store.db.execute("select count(*) from job_templates").fetchone()[0] == 4
    specs = _specs(store.db, cid)
    assert [(s.profile, s.timeout_s) for s in specs] == \
        [("p", 900.0), ("p", 900.0), ("other", 99.0), ("other", 99.0), ("p", 900.0), ("p", 900.0)]
    # one identity, whatever the profile or timeout: counted per configuration
    assert _counts(store.db, cid) == {j.config_key: 3 for j in make_jobs(2)}


def test_deleting_a_campaign_takes_its_templates_and_counts(tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    gone, _ = campaign(store, 3)
    kept, _ = campaign(store, 2)
    store.db.execute("update campaigns set status = ? where id = ?",
                     [CampaignStatus.FINISHED, gone])
    store.db.conn.commit()
    store.retention.delete_campaign(gone)
    assert store.db.execute("select distinct campaign_id from job_templates").fetchall() == \
        [(kept,)]
    assert _counts(store.db, gone) == {}
    assert sum(_counts(store.db, kept).values()) == 2
    store.db.execute("delete from jobs where id = (select max(id) from jobs)")
    assert sum(_counts(store.db, kept).values()) == 1


def test_whole_rows_of_an_older_database_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite_utils.Database(path)
    apply(old, upto=21)  # as dltop before migration 23 stored jobs: each row whole
    old["campaigns"].insert({"id": 1, "name": "c", "status": "finished", "created_at": "t"})
    jobs = make_jobs(2)
    for k, job in enumerate(jobs):
        old["jobs"].insert(job_row(1, k, JobStatus.QUEUED, job))
    old.close()
    reader = open_reader(path)  # cannot migrate: job_specs is a temporary view
    try:
        assert [JobSpec.from_json_dict(json.loads(r["spec_json"])) for r in reader.query(
            "select spec_json from job_specs order by job_id")] == list(jobs)
    finally:
        reader.close()
    store = Store(connect(path))  # migrated: the old rows stay whole, new ones are compact
    store.edits.append_jobs(1, make_jobs(2), "p.toml")
    assert _specs(store.db, 1) == [*jobs, *make_jobs(2)]
    assert _counts(store.db, 1) == {j.config_key: 2 for j in jobs}
