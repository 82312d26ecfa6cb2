"""A served model's device figure says what it plots: a serve run's time is its requests'
median end-to-end latency, not a time per mini-batch (report/data.py), in its title, its
y axis, its caption and the page's section heading; a training model's keeps its own."""

from __future__ import annotations

from tests.results.conftest import CampaignMaker

from dltop.report import data, html, specs
from dltop.report.content import Report
from dltop.results import queries, scaling
from dltop.store import memory_db

SERVE = """[[matrix]]
frameworks = ["openai"]
mode = "serve"
endpoint = "http://127.0.0.1:9/v1"
models = ["served"]
devices = ["gpu:1", "gpu:2"]
"""
TRAIN = """[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1", "cpu:2"]
"""


def _report(profiles: tuple[str, ...]) -> Report:
    db = memory_db()
    for k, profile in enumerate(profiles):
        cid, jobs = CampaignMaker.create(db, profile, f"c{k}")
        for _, job_id in jobs:
            CampaignMaker.add_run(db, cid, job_id, [0.05 + 0.001 * i for i in range(12)], 1)
    ref = ",".join(str(k + 1) for k in range(len(profiles)))
    return data.build(db, queries.resolve_campaigns(db, ref))


def test_a_served_models_device_figure_plots_request_latency() -> None:
    rep = _report((SERVE, TRAIN))
    served = next(f for f in rep.figures if f.key == "latency-served-gpu")
    assert served.title == "served: median e2e request latency vs GPUs"
    assert "mini-batch" not in served.title and "s/iter" not in served.caption
    assert "median e2e s per request" in served.caption
    vl = specs.spec(served)
    assert "median e2e s per request" in str(vl) and "median s/iter" not in str(vl)
    trained = next(f for f in rep.figures if f.key == "time-fcn-r-cpu")
    assert trained.title == "fcn-r: time per mini-batch vs threads"
    page = "\n".join(html.page_parts(rep, draw=lambda vl: "<svg/>"))
    assert "Time per mini-batch or request vs threads / GPUs" in page
    alone = "\n".join(html.page_parts(_report((SERVE,)), draw=lambda vl: "<svg/>"))
    assert "Median e2e request latency vs threads / GPUs" in alone
    assert "Time per mini-batch" not in alone


def test_a_served_models_scaling_figure_and_table_name_request_latency() -> None:
    """The scaling figure of a served model names a request's latency and rate, never a
    mini-batch's; its table's time and rate headers are the serve ones (metricdefs)."""
    rep = _report((SERVE, TRAIN))
    served = next(f for f in rep.figures if f.key == "scaling-served-gpu")
    assert served.title == "served: median e2e request latency scaling with GPUs"
    assert "tokens/s per request (output tokens / e2e request latency)" in served.caption
    assert "samples/s" not in served.caption and "batch" not in served.caption
    trained = next(f for f in rep.figures if f.key == "scaling-fcn-r-cpu")
    assert trained.title == "fcn-r: scaling with threads"
    assert "samples/s against the same framework and batch" in trained.caption
    db = memory_db()
    cid, jobs = CampaignMaker.create(db, SERVE, "s")
    for _, job_id in jobs:
        CampaignMaker.add_run(db, cid, job_id, [0.05] * 12, 1)
    table = scaling.campaigns_scaling_table(db, queries.resolve_campaigns(db, "1"))
    headers = [c.header for c in table.columns]
    assert "median e2e s" in headers and "tok/s per request" in headers
    assert "s/iter" not in headers and "samples/s" not in " ".join(table.notes)
