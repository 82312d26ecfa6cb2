"""store/read's runs, iterations, generations, serving and profile reads: chunked reads
past SQLite's parameter limit, a run with its job, and databases an older dltop wrote."""

from __future__ import annotations

import json
from pathlib import Path

import sqlite_utils

from dltop.catalog import CampaignStatus, RunStatus
from dltop.store import Store, connect
from dltop.store.migrations import apply
from dltop.store.read import generations, iterations, jobs, profile, runs, serving
from dltop.store.read.runs import CHUNK

from .conftest import campaign


def test_evals_and_specs_of_more_runs_than_one_statement_binds(store: Store) -> None:
    cid, job_ids = campaign(store, CHUNK + 3)
    run_ids = [store.start_run(j, cid, 1, "", 8) for j in job_ids]
    for n, run_id in enumerate(run_ids):
        store.add_evals(run_id, [{"idx": 9, "accuracy": n / 1000, "eval_s": 1.0},
                                 {"idx": 4, "accuracy": 0.0, "eval_s": 1.0}])
    got = iterations.evals(store.db, run_ids)
    assert list(got) == run_ids  # every chunk read, in run order
    assert [r["idx"] for r in got[run_ids[-1]]] == [4, 9]
    assert got[run_ids[-1]][1]["accuracy"] == (CHUNK + 2) / 1000
    specs = jobs.run_specs(store.db, run_ids)
    assert set(specs) == set(run_ids)  # every chunk read
    assert json.loads(specs[run_ids[-1]]["spec_json"])["batch_size"] == CHUNK + 3


def test_a_run_with_its_job_spec_and_profile(store: Store) -> None:
    cid, (job_id, *_) = campaign(store, 2)
    run_id = store.start_run(job_id, cid, 1, "", 8)
    store.set_profile(run_id, {"profile_steps": 2, "profile_step_ms": 5.0,
                               "profile_device": "cpu"},
                      [{"name": "mm", "calls": 4, "self_cpu_ms": 6.0, "share_pct": 60.0},
                       {"name": "add", "calls": 2, "self_cpu_ms": 1.0, "share_pct": 10.0}])
    store.finish_run(run_id, job_id, RunStatus.OK, {"median_s": 0.1, "note": "n"})
    row = runs.with_job(store.db, run_id)
    assert row is not None and row["id"] == run_id and row["status"] == RunStatus.OK
    assert (row["framework"], row["batch_size"], row["note"]) == ("torch", 1, "n")
    assert row["profile_steps"] == 2 and json.loads(row["spec_json"])["model"] == "fcn-r"
    assert runs.with_job(store.db, run_id + 1) is None
    assert [o["name"] for o in profile.ops(store.db, run_id)] == ["mm", "add"]
    assert [o["name"] for o in profile.ops(store.db, run_id, top=1)] == ["mm"]
    assert [r["id"] for r in profile.profiled_runs(store.db, [cid], 5)] == [run_id]
    store.set_campaign_status(cid, CampaignStatus.FINISHED)
    marks = runs.campaign_marks(store.db, [cid])
    assert marks is not None and marks[0][1] == CampaignStatus.FINISHED
    assert marks[0][4:] == (1, run_id)  # its run count and last run


def test_a_database_before_the_tables_reads_empty_then_migrated_reads_them(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite_utils.Database(path)
    apply(old, upto=10)
    assert runs.campaign_marks(old, [1]) is None  # no job counts before migration 11
    apply(old, upto=13)
    assert iterations.evals(old, [1]) == {} and iterations.archived(old, 1) is None
    assert profile.ops(old, 1) == [] and profile.profiled_runs(old, [1], 5) == []
    assert generations.requests(old, [1]) == {} and serving.requests(old, [1]) == {}
    apply(old)  # on the same connection: the cached schema facts see the new tables
    store = Store(old)
    cid, (job_id, *_) = campaign(store, 1)
    run_id = store.start_run(job_id, cid, 1, "", 8)
    store.add_evals(run_id, [{"idx": 0, "loss": 2.5}])
    assert iterations.evals(old, [run_id])[run_id][0]["loss"] == 2.5
    old.conn.close()
    assert iterations.evals(connect(path), [run_id])[run_id][0]["idx"] == 0
