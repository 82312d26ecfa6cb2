"""Evaluations and operator profiles in the store (migration 14): writes, and retention."""

from __future__ import annotations

from typing import Any

from dltop.catalog import CampaignStatus, RunStatus
from dltop.store import Store

from .conftest import campaign


def _run(store: Store) -> tuple[int, int, int]:
    cid, (job_id, *_) = campaign(store, 1)
    run_id = store.start_run(job_id, cid, 1, "", 8)
    store.add_iterations(run_id, [{"idx": i, "seconds": 0.1, "samples": 8, "warmup": 0,
                                   "loss": None} for i in range(4)])
    return cid, job_id, run_id


def _rows(store: Store, sql: str) -> list[dict[str, Any]]:
    return list(store.db.query(sql))


def test_evals_are_keyed_by_run_and_index_and_missing_keys_are_null(store: Store) -> None:
    _, _, run_id = _run(store)
    store.add_evals(run_id, [{"idx": 3, "epoch": 1.0, "accuracy": 0.5, "eval_s": 0.2,
                              "train_s": 1.0}])
    store.add_evals(run_id, [{"idx": 3, "epoch": 1.0, "accuracy": 0.6, "eval_s": 0.2,
                              "train_s": 1.0}, {"idx": 7, "perplexity": 90.0,
                                                "eval_s": 0.1, "train_s": 2.0}])
    rows = _rows(store, "select idx, accuracy, perplexity, loss from evals order by idx")
    assert rows == [{"idx": 3, "accuracy": 0.6, "perplexity": None, "loss": None},
                    {"idx": 7, "accuracy": None, "perplexity": 90.0, "loss": None}]


def test_a_profile_replaces_the_runs_previous_one(store: Store) -> None:
    _, _, run_id = _run(store)
    summary = {"profile_steps": 5, "profile_step_ms": 10.0, "profile_device": "cpu"}
    op = {"name": "a", "calls": 1, "self_cpu_ms": 1.0, "total_ms": 1.0, "share_pct": 2.0}
    store.set_profile(run_id, summary, [op, {**op, "name": "b"}])
    store.set_profile(run_id, {**summary, "profile_steps": 3}, [{**op, "name": "c"}])
    assert _rows(store, "select rank, name, self_device_ms from profile_ops") == [
        {"rank": 1, "name": "c", "self_device_ms": None}]
    assert _rows(store, "select profile_steps from runs") == [{"profile_steps": 3}]


def test_prune_keeps_evals_and_profiles_deleting_the_campaign_removes_them(
        store: Store) -> None:
    cid, job_id, run_id = _run(store)
    store.add_evals(run_id, [{"idx": 3, "accuracy": 0.5, "eval_s": 0.2, "train_s": 1.0}])
    store.set_profile(run_id, {"profile_steps": 5, "profile_step_ms": 1.0,
                               "profile_device": "cpu"},
                      [{"name": "a", "calls": 1, "self_cpu_ms": 1.0, "total_ms": 1.0,
                        "share_pct": 2.0}])
    store.finish_run(run_id, job_id, RunStatus.OK, {"median_s": 0.1})
    store.set_campaign_status(cid, CampaignStatus.FINISHED)
    assert store.retention.prune_run(run_id).iterations == 4
    assert _rows(store, "select count(*) as n from iterations") == [{"n": 0}]
    assert _rows(store, "select count(*) as n from evals") == [{"n": 1}]
    assert _rows(store, "select count(*) as n from profile_ops") == [{"n": 1}]
    assert store.retention.delete_campaign(cid) == 1
    for table in ("evals", "profile_ops", "runs"):
        assert _rows(store, f"select count(*) as n from {table}") == [{"n": 0}]


def test_the_reports_profile_figure_reads_what_the_profile_export_shows(store: Store) -> None:
    from dltop.report.profiles import MAX_OPS, profile_figures
    from dltop.results.profile import profile_table

    cid, job_id, run_id = _run(store)
    ops = [{"name": f"op{k}", "calls": 2, "self_cpu_ms": 10.0 * k, "total_ms": 1.0,
            "share_pct": 2.0, "self_device_ms": None if k % 2 else 4.0 * k}
           for k in range(1, MAX_OPS + 3)]
    store.set_profile(run_id, {"profile_steps": 4, "profile_step_ms": 10.0,
                               "profile_device": "cuda"}, ops)
    store.finish_run(run_id, job_id, RunStatus.OK, {"median_s": 0.1})
    (fig,) = profile_figures(store.db, [cid])
    table = profile_table(store.db, run_id)
    cpu = {r["rank"]: r["ms"] for r in fig.rows if r["time"] == "self CPU"}
    device = {r["rank"]: r["ms"] for r in fig.rows if r["time"] == "self device"}
    # the top MAX_OPS, per profiled step, the same numbers as the table's rows
    assert sorted(cpu) == list(range(1, MAX_OPS + 1))
    assert cpu == {int(row.cells[0].value): row.cells[3].value
                   for row in table.rows[:MAX_OPS]}
    assert device == {k: 4.0 * k / 4 for k in range(2, MAX_OPS + 1, 2)}
    assert "mean 10.000 ms per step on cuda" in fig.caption
    # one run label in the figure's title and the export's (labels.compose)
    label = fig.title.split(": ", 1)[1]
    assert label.endswith("#1") and f"({label})" in table.title
