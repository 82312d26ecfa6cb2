"""Generation requests in the store (migration 17): the engine's pairing of a ``generate``
event with its ``iter``, the packed latencies, migration of an older database, and
deleting a campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlite_utils

from dltop.catalog import CampaignStatus, RunStatus
from dltop.jobs.evals import RunExtras
from dltop.results.generation import generations_of, stats
from dltop.store import Store, connect
from dltop.store.generations import pack_seconds, unpack_seconds
from dltop.store.migrations import MIGRATIONS, apply

from .conftest import campaign


def _run(store: Store) -> tuple[int, int, int]:
    cid, (job_id, *_) = campaign(store, 1)
    return cid, job_id, store.start_run(job_id, cid, 1, "", 2)


def _event(i: int, itl: list[float], warmup: bool = False) -> dict[str, Any]:
    return {"event": "generate", "index": i, "warmup": warmup, "ttft_s": 0.1 + i,
            "itl_s": itl, "prompt_tokens": 8, "new_tokens": len(itl) + 1, "batch": 2}


def _direct(fn: Any, *args: Any, **_what: Any) -> None:  # the engine's write_later, now
    fn(*args)


def test_each_generate_pairs_with_its_iter_and_an_orphan_keeps_a_null_e2e(
        store: Store) -> None:
    _, _, run_id = _run(store)
    extras = RunExtras(run_id, store, _direct, inference=False)
    assert extras.on_event(_event(0, [0.01, 0.02], warmup=True))
    extras.on_iter(0, 0.13)
    assert extras.on_event(_event(1, [0.03, 0.04]))
    extras.on_iter(0, 9.0)  # not its index: no pairing
    extras.flush()
    assert list(store.db.query("select idx, e2e_s from generations")) == [
        {"idx": 0, "e2e_s": 0.13}]  # the waiting request is not written before its end
    extras.on_iter(1, 1.17)
    assert extras.on_event(_event(2, [0.05, 0.06]))  # the runner dies before its iter
    extras.flush(final=True)
    rows = list(store.db.query("select * from generations order by idx"))
    assert [(r["idx"], r["warmup"], r["e2e_s"]) for r in rows] == [
        (0, 1, 0.13), (1, 0, 1.17), (2, 0, None)]
    assert unpack_seconds(rows[1]["itl_s"]) == (0.03, 0.04)
    assert extras.n_generations == 3
    got = generations_of(store.db, [run_id])[run_id]
    assert [r.idx for r in got] == [1, 2]  # measured only
    st = stats(got)
    assert st is not None and st.requests == 2 and st.n_itl == 4
    # Request 2 has no e2e: no TPOT; one TPOT is too few for p90 and p99 (the
    # percentile rule, docs/metrics.md "Statistics policy").
    assert st.tpot_s == ((1.17 - 1.1) / 2, None, None)
    assert len(generations_of(store.db, [run_id], warmup=True)[run_id]) == 3


def test_latencies_round_trip_exactly() -> None:
    values = [1e-9, 0.1, 1 / 3, 123456.789, 0.0]
    blob = pack_seconds(values)
    assert len(blob) == 8 * len(values) and unpack_seconds(blob) == tuple(values)
    assert unpack_seconds(None) == () and unpack_seconds(b"") == ()


def test_migration_17_adds_the_table_to_an_older_database(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite_utils.Database(path)
    apply(old, upto=16)
    assert "generations" not in old.table_names()
    old.conn.close()
    store = Store(connect(path))
    assert MIGRATIONS[16].version == 17 and "generations" in store.db.table_names()
    assert generations_of(store.db, [1]) == {}


def test_deleting_a_campaign_deletes_its_generations_prune_keeps_them(store: Store) -> None:
    cid, job_id, run_id = _run(store)
    store.add_iterations(run_id, [{"idx": 0, "seconds": 0.2, "samples": 6, "warmup": 0}])
    store.add_generations(run_id, [{"idx": 0, "warmup": 0, "ttft_s": 0.1, "e2e_s": 0.2,
                                    "prompt_tokens": 8, "new_tokens": 3, "batch": 2,
                                    "itl_s": pack_seconds([0.05, 0.05])}])
    store.finish_run(run_id, job_id, RunStatus.OK, {"median_s": 0.2})
    store.set_campaign_status(cid, CampaignStatus.FINISHED)
    assert store.retention.prune_run(run_id).iterations == 1
    assert next(store.db.query("select count(*) as n from generations"))["n"] == 1
    assert store.retention.delete_campaign(cid) == 1
    assert next(store.db.query("select count(*) as n from generations"))["n"] == 0
