"""The scaling table over nodes (issue 15): runs at 1 and 2 nodes, stored through the store."""

from __future__ import annotations

import json

import pytest

from dltop.results import scaling
from dltop.results.render import render
from dltop.store import memory_db

from .conftest import CampaignMaker

PROFILE = """name = "n"
[defaults]
executor = "slurm"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["gpu:1", "gpu:2"]
nodes = [1, 2]
"""


def _campaign(seconds: dict[tuple[str, int], float]) -> list[scaling.ScalingRow]:
    db = memory_db()
    cid, jobs = CampaignMaker.create(db, PROFILE, "n")
    for spec, job_id in jobs:
        CampaignMaker.add_run(db, cid, job_id, [seconds[(spec.device.label, spec.nodes)]] * 5)
    return scaling.scaling_rows(db, cid)


def test_speedup_per_worker_and_against_one_node() -> None:
    # global batch 8 at every size: samples/s = 8 / seconds
    rows = _campaign({("gpu:1", 1): 1.0, ("gpu:1", 2): 0.6, ("gpu:2", 1): 0.5,
                      ("gpu:2", 2): 0.4})
    got = {(r.device, r.nodes): r for r in rows}
    assert [(r.device, r.nodes) for r in rows] == [("gpu:1", 1), ("gpu:1", 2), ("gpu:2", 1),
                                                   ("gpu:2", 2)]
    # against gpu:1 on 1 node, per worker (N x nodes)
    assert got[("gpu:2", 2)].speedup == pytest.approx(2.5)
    assert got[("gpu:2", 2)].efficiency == pytest.approx(2.5 / 4)
    assert got[("gpu:1", 2)].efficiency == pytest.approx(1 / 0.6 / 2)
    # against the same devices on 1 node: efficiency = that speedup / nodes
    assert got[("gpu:2", 2)].node_speedup == pytest.approx(0.5 / 0.4)
    assert got[("gpu:2", 2)].node_efficiency == pytest.approx(0.5 / 0.4 / 2)
    assert got[("gpu:1", 1)].node_speedup is None  # itself the 1-node run


def test_the_table_gains_a_nodes_column_and_the_vs_one_node_columns() -> None:
    rows = _campaign({("gpu:1", 1): 1.0, ("gpu:1", 2): 0.5, ("gpu:2", 1): 0.5,
                      ("gpu:2", 2): 0.25})
    md = render(scaling.scaling_table(rows, "t"), "md")
    assert ("| model | framework | batch | devices | nodes | s/iter | samples/s | speedup | "
            "efficiency | speedup vs 1 node | efficiency vs 1 node |") in md
    assert "| gpu:2 | 2 | 0.2500 | 32.0 | 4.00 | 100% | 2.00 | 100% |" in md
    assert "efficiency = speedup / (N x nodes)" in md
    doc = json.loads(render(scaling.scaling_table(rows, "t"), "json"))
    last = doc["rows"][-1]
    assert (last["nodes"], last["node_speedup"], last["node_efficiency"]) == (2, 2.0, 1.0)


def test_a_one_node_set_keeps_its_table() -> None:
    db = memory_db()
    cid, jobs = CampaignMaker.create(db, CampaignMaker.profile("p", ["gpu:1", "gpu:2"]))
    for (_, job_id), s in zip(jobs, (1.0, 0.5), strict=True):
        CampaignMaker.add_run(db, cid, job_id, [s] * 5)
    md = render(scaling.scaling_table(scaling.scaling_rows(db, cid), "t"), "md")
    assert "| model | framework | batch | devices | s/iter | samples/s | speedup | " \
           "efficiency |" in md
    assert "node" not in md.split("\n\n")[0].splitlines()[0]


def test_the_summary_and_pivot_key_rows_by_nodes_when_they_vary() -> None:
    from dltop.results import export

    db = memory_db()
    cid, jobs = CampaignMaker.create(db, PROFILE, "n")
    for k, (_, job_id) in enumerate(jobs):
        CampaignMaker.add_run(db, cid, job_id, [0.1 * (k + 1)] * 5)
    for table in ("summary", "pivot"):
        t = export.results_table(db, cid, table)
        keys = [c.key for c in t.columns]
        assert "nodes" in keys, (table, keys)
