"""Aggregation over repeats and the four export formats, on a fixture campaign."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from dltop.errors import UserError
from dltop.profiles.loader import parse
from dltop.results import export, queries
from dltop.results.aggregate import config_results
from dltop.results.render import latex_escape, render
from dltop.results.stats import summarize_run
from dltop.results.table import NOTE_INCOMPLETE
from dltop.store import Store, memory_db
from dltop.store.read.jobs import status_counts
from dltop.telemetry.values import RunTelemetry

PROFILE = """
name = "fix_ture"
[defaults]
repeats = 2
[[matrix]]
frameworks = ["torch"]
models = ["alexnet-r", "fcn-r"]
batch_sizes = [64]
devices = ["cpu:2", "cpu:1"]
"""


def finish(store: Store, job_id: int, status: str, seconds: list[float] | None = None,
           attempt: int = 1) -> None:
    run = store.start_run(job_id, 1, attempt, "", 64)
    fields = summarize_run(seconds, 64).to_columns() if seconds else {}
    store.finish_run(run, job_id, status, fields)


@pytest.fixture
def db():  # type: ignore[no-untyped-def]
    database = memory_db()
    store = Store(database)
    jobs = parse(PROFILE, "x", "x").jobs
    cid = store.create_campaign("fix_ture", ["x"], ["dltop"], "host", 1, None)
    ids = store.add_jobs(cid, jobs)
    spec = {(j.model, j.device.label, j.repeat): i for j, i in zip(jobs, ids, strict=True)}
    # alexnet-r cpu:1: two ok repeats, medians 0.2 and 0.4
    finish(store, spec[("alexnet-r", "cpu:1", 0)], "ok", [0.2, 0.2, 0.2])
    finish(store, spec[("alexnet-r", "cpu:1", 1)], "ok", [0.4, 0.4, 0.4])
    # alexnet-r cpu:2: one crashed then retried ok (latest attempt counts), one oom
    finish(store, spec[("alexnet-r", "cpu:2", 0)], "crashed")
    finish(store, spec[("alexnet-r", "cpu:2", 0)], "ok", [0.1, 0.2, 0.1], attempt=2)
    finish(store, spec[("alexnet-r", "cpu:2", 1)], "oom")
    # fcn-r cpu:1: oom and timeout -> OOM wins; fcn-r cpu:2: unsupported twice
    finish(store, spec[("fcn-r", "cpu:1", 0)], "timeout")
    finish(store, spec[("fcn-r", "cpu:1", 1)], "oom")
    finish(store, spec[("fcn-r", "cpu:2", 0)], "unsupported")
    finish(store, spec[("fcn-r", "cpu:2", 1)], "unsupported")
    return database


def test_config_results(db) -> None:  # type: ignore[no-untyped-def]
    res = {(r.model, r.device): r for r in config_results(db, 1)}
    a1 = res[("alexnet-r", "cpu:1")]
    assert (a1.status, a1.n_runs) == ("ok", 2)
    assert a1.median_s == pytest.approx(0.3) and a1.spread_s == pytest.approx(0.2)
    # throughput: each run's total samples / total seconds, median over the runs
    assert a1.samples_per_s == pytest.approx((64 / 0.2 + 64 / 0.4) / 2)
    a2 = res[("alexnet-r", "cpu:2")]
    assert (a2.status, a2.n_runs, a2.noisy) == ("ok", 1, True)
    assert res[("fcn-r", "cpu:1")].status == "oom"
    assert res[("fcn-r", "cpu:2")].status == "unsupported"


def test_markdown(db) -> None:  # type: ignore[no-untyped-def]
    text = render(export.build_table(db, 1, "time"), "md")
    lines = text.splitlines()
    assert lines[2] == "| model | framework | batch | cpu:1 | cpu:2 |"
    # catalog order: fcn-r before alexnet-r
    assert lines[4] == "| fcn-r | torch | 64 | OOM | n/a |"
    # cpu:2 has one ok run of the two planned: incomplete, with its count
    assert lines[5] == "| alexnet-r | torch | 64 | 0.3000 | 0.1000* (1/2) |"
    assert NOTE_INCOMPLETE in lines
    # no run stored an environment row: the caption says so once, after what is known
    assert lines[-1].startswith("Environment: host ") and lines[-1].endswith(
        "; OS, CPU, frameworks, Python, BLAS, threads n/a (no run reported its environment).")


def test_csv_and_throughput(db) -> None:  # type: ignore[no-untyped-def]
    text = render(export.build_table(db, 1, "throughput"), "csv")
    rows = list(csv.reader(line for line in io.StringIO(text) if not line.startswith("#")))
    assert rows[0] == ["model", "framework", "batch", "cpu:1", "cpu:1 status", "cpu:2",
                       "cpu:2 status"]
    assert rows[1] == ["fcn-r", "torch", "64", "", "OOM", "", "n/a"]
    assert rows[2][4] == "ok; n 2/2"  # its status, then n (ok runs / repeats planned)
    assert float(rows[2][3]) == pytest.approx((64 / 0.2 + 64 / 0.4) / 2)


def test_json(db) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(render(export.build_table(db, 1, "time"), "json"))
    assert [c["key"] for c in doc["columns"] if c["role"] == "value"] == ["cpu:1", "cpu:2"]
    assert doc["metric"] == "time" and doc["layout"] == "pivot"
    assert [c["id"] for c in doc["campaigns"]] == [1]
    cell = doc["rows"][1]["cells"]["cpu:1"]
    assert cell["n_runs"] == 2 and cell["value"] == pytest.approx(0.3)
    assert doc["rows"][0]["cells"]["cpu:1"]["status"] == "oom"


def test_latex_escapes(db) -> None:  # type: ignore[no-untyped-def]
    text = render(export.build_table(db, 1, "time"), "latex")
    assert "\\toprule" in text and "\\bottomrule" in text
    assert "fix\\_ture" in text
    assert "fcn-r & torch & 64 & OOM & n/a \\\\" in text
    assert latex_escape("50% & #1_a") == "50\\% \\& \\#1\\_a"


def test_resolve_campaign_errors(db) -> None:  # type: ignore[no-untyped-def]
    assert queries.resolve_campaign(db, "latest").id == 1
    with pytest.raises(UserError, match=r"no campaign 7 \(most recent: 1"):
        queries.resolve_campaign(db, 7)
    with pytest.raises(UserError, match="no campaigns"):
        queries.resolve_campaign(memory_db(), None)


def test_recent_runs(db) -> None:  # type: ignore[no-untyped-def]
    runs = queries.recent_runs(db, limit=3)
    assert len(runs) == 3 and runs[0].run_id > runs[1].run_id
    assert status_counts(db, 1)["unsupported"] == 2


def test_simulated_telemetry_is_marked(db) -> None:  # type: ignore[no-untyped-def]
    assert "SIMULATED" not in render(export.build_table(db, 1, "time"), "md")
    # what the engine stores for a CPU run on a host of simulated GPUs (--fake-gpus)
    Store(db).telemetry.write_run_telemetry(1, RunTelemetry(telemetry_simulated=True))
    assert "SIMULATED GPUs" in render(export.build_table(db, 1, "time"), "md")
    doc = json.loads(render(export.build_table(db, 1, "time"), "json"))
    assert doc["simulated_telemetry"] is True


def test_exports_read_the_runs_summaries_not_the_samples(db) -> None:  # type: ignore[no-untyped-def]
    for run_id in [r["id"] for r in db.query("select id from runs")]:
        # summaries as the engine stores them, over many sample rows
        Store(db).telemetry.write_run_telemetry(run_id, RunTelemetry(tree_cpu_mean_pct=90.0))
        db["host_samples"].insert_all({"run_id": run_id, "n": 1, "cpu_mean_pct": 1.0,
                                       "tree_cpu_pct": 5.0} for _ in range(50))
        db["gpu_samples"].insert_all({"run_id": run_id, "gpu_index": 0, "n": 1,
                                      "simulated": 0} for _ in range(50))
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    for table in export.TABLES:
        if table in ("profile", "slo", "overhead"):  # one run's operators; serve runs only
            continue
        render(export.results_table(db, 1, table, "cpu" if table == "pivot" else "time"),
                      "json")
    db.conn.set_trace_callback(None)
    assert seen and not [sql for sql in seen if re.search(r"\b(gpu|host)_samples\b", sql)]


def test_a_database_not_yet_migrated_still_marks_simulated_cpu_runs() -> None:
    db = memory_db()
    store = Store(db)
    jobs = parse(PROFILE, "f.toml", "f").jobs
    cid = store.create_campaign("c", ["f.toml"], ["dltop"], "h", 1, None)
    ids = store.add_jobs(cid, jobs)
    finish(store, ids[0], "ok", [0.5, 0.5])
    db["gpu_samples"].insert({"run_id": 1, "gpu_index": 0, "n": 1, "simulated": 1})
    assert "SIMULATED" not in render(export.build_table(db, cid, "time"), "md")
    # as a reader sees a database an older dltop wrote (readers do not migrate)
    db.execute("delete from schema_migrations where version = 11")
    assert "SIMULATED GPUs" in render(export.build_table(db, cid, "time"), "md")


def test_csv_pivot_cells_carry_n_and_flags_as_json_does(campaigns) -> None:  # type: ignore[no-untyped-def]
    """A pivot cell's CSV status said only ``ok`` where JSON has n, incomplete, noisy and
    shared: the status text carries them (``ok; n 1/2; noisy, shared, incomplete``), the
    number column stays the raw value."""
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("f", ["cpu:1", "cpu:2"], repeats=2))
    ids: dict[str, list[int]] = {}
    for spec, job_id in jobs:
        ids.setdefault(spec.device.label, []).append(job_id)
    for job_id in ids["cpu:1"]:
        campaigns.add_run(db, cid, job_id, [0.1, 0.1, 0.1])
    # cpu:2: one run of two, noisy (CV > 0.10), another engine's runner on its devices
    campaigns.add_run(db, cid, ids["cpu:2"][0], [0.1, 0.3, 0.1, 0.3],
                      fields={"concurrent_runs": 1})
    table = export.results_table(db, cid, "pivot", "time")
    (row,) = csv.DictReader(line for line in render(table, "csv").splitlines()
                            if not line.startswith("#"))
    assert row["cpu:1 status"] == "ok; n 2/2" and float(row["cpu:1"]) == pytest.approx(0.1)
    assert row["cpu:2 status"] == "ok; n 1/2; noisy, shared, incomplete"
    (cell,) = [json.loads(render(table, "json"))["rows"][0]["cells"]["cpu:2"]]
    assert (cell["n_runs"], cell["noisy"], cell["shared"], cell["incomplete"]) == (
        1, True, True, True)
    assert float(row["cpu:2"]) == pytest.approx(cell["value"])


def test_a_cell_merging_versions_is_marked(campaigns) -> None:  # type: ignore[no-untyped-def]
    """Runs of one configuration on one host under two torch versions (one campaign), or
    two dltop versions (two campaigns exported together), merge into one cell as
    repeats; the caption listed both versions but not which cell: the cell says it
    (``~``, its note, the summary's flag, JSON's versions, CSV's status)."""
    db = memory_db()
    cid, jobs = campaigns.create(db, campaigns.profile("v", ["cpu:1", "cpu:2"], repeats=2))
    for spec, job_id in jobs:
        version = "2.4.0" if spec.device.label == "cpu:1" and job_id == max(
            j for s, j in jobs if s.device.label == "cpu:1") else "2.3.1"
        campaigns.add_run(db, cid, job_id, [0.1, 0.1, 0.1],
                          fields={"framework_version": version})
    pivot = export.results_table(db, cid, "pivot", "time")
    md = render(pivot, "md")
    assert "| 0.1000~ | 0.1000 |" in md and "~ mixed versions:" in md
    (row,) = json.loads(render(pivot, "json"))["rows"]
    assert row["cells"]["cpu:1"]["versions"] == ["torch 2.3.1 | 2.4.0"]
    assert "versions" not in row["cells"]["cpu:2"]
    (line,) = [x for x in render(pivot, "csv").splitlines() if x.startswith("fcn-r")]
    assert "0.1,ok; n 2/2; mixed-versions,0.1,ok; n 2/2" in line, line
    flags = [r["flags"] for r in json.loads(render(
        export.results_table(db, cid, "summary"), "json"))["rows"]]
    assert flags == ["mixed versions (torch 2.3.1 | 2.4.0)", ""]
    # two campaigns of one configuration under two dltop versions, exported together
    other = memory_db()
    ids = []
    for version in ("0.1.0", "0.2.0"):
        c, js = campaigns.create(other, campaigns.profile("d", ["cpu:1"]), name=f"d{version}")
        campaigns.add_run(other, c, js[0][1], [0.1, 0.1, 0.1])
        other["campaigns"].update(c, {"dltop_version": version})
        ids.append(c)
    (row,) = json.loads(render(export.results_table(other, ids, "pivot"), "json"))["rows"]
    assert row["cells"]["cpu:1"]["versions"] == ["dltop 0.1.0 | 0.2.0"]
    assert row["cells"]["cpu:1"]["n_runs"] == 2
    alone = export.results_table(other, ids[:1], "pivot")
    assert "~" not in render(alone, "md")
