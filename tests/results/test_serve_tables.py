"""A set of serve runs' tables say what they measure (issue 41 audits): the caption states
only the settings of serve runs (no lr, optimizer, data or precision), no TFLOP/s, MFU or
precision column, and the time reads as the end-to-end request latency it is. A training
set beside it keeps its table. Stored runs here; the real serve run against the
streaming fake is tests/serving/test_serve_report.py."""

from __future__ import annotations

import sqlite_utils
from tests.results.conftest import CampaignMaker

from dltop.results import export
from dltop.results.compare import compare
from dltop.results.comparetable import compare_table
from dltop.results.queries import resolve_campaign
from dltop.results.render import render
from dltop.store import memory_db

SERVE = """[[matrix]]
frameworks = ["openai"]
mode = "serve"
endpoint = "http://127.0.0.1:9/v1"
models = ["m"]
request_rate = [5, 10]
concurrency = 2
"""
TRAIN = """[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
"""
TRAINING_SETTINGS = ("lr ", "momentum", "optimizer", "data synthetic", "precision",
                     "batch scaling")


def _campaign(db: sqlite_utils.Database, profile: str, name: str) -> int:
    cid, jobs = CampaignMaker.create(db, profile, name)
    for _, job_id in jobs:
        CampaignMaker.add_run(db, cid, job_id, [0.05 + 0.001 * i for i in range(12)], 1)
    return cid


def test_a_serve_summary_states_serve_settings_only() -> None:
    db = memory_db()
    cid = _campaign(db, SERVE, "s")
    md = render(export.results_table(db, cid, "summary"), "md")
    (constant,) = [line for line in md.splitlines() if line.startswith("constant:")]
    for word in TRAINING_SETTINGS:  # it read "lr 0.01, momentum 0, optimizer sgd, ..."
        assert word not in constant, constant
    for word in ("prompt 128", "new tokens 128", "concurrency 2", "api chat",
                 "arrival poisson", "mode serve"):
        assert word in constant, constant
    header = md.splitlines()[2]
    assert "| median e2e s |" in header and "| mean e2e s |" in header
    assert "TFLOP/s" not in md and "MFU" not in md and "| precision |" not in header
    assert "median s" not in header
    csv = render(export.results_table(db, cid, "summary"), "csv")
    assert "TFLOP/s" not in csv and "MFU" not in csv and ",precision," not in csv
    json_doc = export.results_table(db, cid, "summary").meta["identity"]["constant"]
    assert "lr" not in json_doc and "optimizer" not in json_doc and "concurrency" in json_doc

    pivot = export.results_table(db, cid, "pivot", "time")
    assert pivot.title.endswith("median end-to-end request latency in s")


def test_a_serve_comparison_names_the_request_latency() -> None:
    db = memory_db()
    a, b = _campaign(db, SERVE, "a"), _campaign(db, SERVE, "b")
    ca, cb = resolve_campaign(db, a), resolve_campaign(db, b)
    rows = compare(db, a, b, "time")
    table = compare_table(rows, ca, cb, "time", 0.05, db)
    assert table.title.endswith(": median e2e s/request")  # it said "median s/iter"
    assert "precision" not in [c.key for c in table.columns]
    assert "B/A of the median e2e s/request" in table.notes[0]


def test_a_training_summary_keeps_its_settings_and_columns() -> None:
    db = memory_db()
    cid = _campaign(db, TRAIN, "t")
    md = render(export.results_table(db, cid, "summary"), "md")
    (constant,) = [line for line in md.splitlines() if line.startswith("constant:")]
    for word in ("lr 0.01", "momentum 0", "optimizer sgd", "data synthetic",
                 "batch scaling global"):
        assert word in constant, constant
    header = md.splitlines()[2]
    # fp32 in every row: stated once in the constant line, not per row (CSV keeps it)
    assert "precision fp32" in constant and "| median s |" in header
    assert "| precision |" not in header
    assert "precision" in render(export.results_table(db, cid, "summary"), "csv")
    assert "TFLOP/s" in render(export.results_table(db, cid, "summary"), "csv")
    assert export.results_table(db, cid, "pivot", "time").title.endswith(
        "median seconds per mini-batch")


def test_a_mixed_set_keeps_what_its_training_rows_need() -> None:
    db = memory_db()
    ids = [_campaign(db, p, f"c{k}") for k, p in enumerate((SERVE, TRAIN))]
    table = export.results_table(db, ids, "summary")
    md = render(table, "md")
    assert "| median s |" in md.splitlines()[2] and "constant: precision fp32," in md
    assert "tflops" in [c.key for c in table.columns]


def test_burstiness_is_stated_for_gamma_arrivals_only() -> None:
    # the profile stores burstiness 1 for every arrival; it shapes gamma's gaps only
    db = memory_db()
    plain = _campaign(db, SERVE + 'arrival = "constant"\n', "c")
    gamma = _campaign(db, SERVE + 'arrival = "gamma"\nburstiness = 0.5\n', "g")
    for cid, says in ((plain, None), (gamma, "burstiness 0.5")):
        table = export.results_table(db, cid, "summary")
        (constant,) = [line for line in render(table, "md").splitlines()
                       if line.startswith("constant:")]
        assert ("burstiness" in constant) == bool(says), constant
        assert says is None or says in constant
        assert ("burstiness" in table.meta["identity"]["constant"]) == bool(says)
    both = export.results_table(db, [plain, gamma], "summary")  # a row key: "-" and 0.5
    assert "burstiness" in both.meta["identity"]["varying"]
