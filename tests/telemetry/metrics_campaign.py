"""The campaign the Prometheus series are checked on, stored the same way for the test
suite (tests/telemetry/test_campaign_metrics.py) and for a real Prometheus
(scripts/prometheus_check.py), so both read one known state."""

from __future__ import annotations

from pathlib import Path

from dltop.jobs import campaign
from dltop.procs import process_start_time
from dltop.profiles.loader import parse
from dltop.results.stats import summarize_run
from dltop.store import Store, connect

PROFILE = """
name = "prec"
[defaults]
iterations = 20
warmup = 5
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [64]
devices = ["cpu:1"]
precision = "fp32"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [64]
devices = ["cpu:1"]
precision = "bf16"
"""
WAITING = ("gpu 0: 1st in line; gpu-0 held by campaign 7 `train alice's model` (pid 4242, "
           "user alice, db /home/alice/secret.db)")
"""What a waiting engine stores for the TUI and ``dltop status`` (jobs.lease's text)."""
WAITING_DEVICES, WAITING_HOLDERS = "gpu 0", 1
"""What it stores beside it for the exporter (DeviceLease.waiting_facts)."""


def add_waiting(path: Path, name: str = "waits") -> int:
    """Store at ``path`` a campaign of one queued job that waits for :data:`WAITING`, as
    its engine stores it (its engine not recorded: a waiting campaign is reported
    whether or not one is alive); returns its id."""
    store = Store(connect(path))
    plan = campaign.preflight([parse(PROFILE, f"{name}.toml", name)], 0, False)
    cid, _ = campaign.create(store, plan, ["dltop", "run", f"{name}.toml"])
    with store.db.conn:
        store.db.execute("update campaigns set status = 'running' where id = ?", [cid])
    store.queue.set_waiting(cid, WAITING, WAITING_DEVICES, WAITING_HOLDERS)
    store.db.close()
    return cid


def seed(path: Path, engine_pid: int) -> None:
    """Store at ``path`` campaign "prec": fcn-r fp32 crashed, alexnet-r fp32 ok (skewed
    iterations), fcn-r bf16 running (8 of 25 iterations), alexnet-r bf16 queued; the
    campaign waits for a GPU (:data:`WAITING`, stored as the engine stores it), its
    engine the live ``engine_pid``."""
    store = Store(connect(path))
    plan = campaign.preflight([parse(PROFILE, "prec.toml", "prec")], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "prec.toml"])
    by = {(q.spec.model, q.spec.precision): q.job_id for q in queued}
    rid = store.start_run(by[("fcn-r", "fp32")], cid, 1, "", 64)
    store.finish_run(rid, by[("fcn-r", "fp32")], "crashed", {"error_message": "boom"})
    rid = store.start_run(by[("alexnet-r", "fp32")], cid, 1, "", 64)
    seconds = [0.1, 0.1, 0.4]
    store.add_iterations(rid, [{"idx": i, "seconds": s, "samples": 64, "warmup": 0,
                                "loss": None} for i, s in enumerate(seconds)])
    store.finish_run(rid, by[("alexnet-r", "fp32")], "ok",
                     summarize_run(seconds, 64).to_columns())
    rid = store.start_run(by[("fcn-r", "bf16")], cid, 1, "", 64)
    store.add_iterations(rid, [{"idx": i, "seconds": 0.2, "samples": 64, "warmup": int(i < 5),
                                "loss": None} for i in range(8)])
    with store.db.conn:
        store.db.execute("update campaigns set status = 'running', "
                         "engine_pid = ?, engine_start_time = ?",
                         [engine_pid, process_start_time(engine_pid)])
    store.queue.set_waiting(cid, WAITING, WAITING_DEVICES, WAITING_HOLDERS)
    store.db.close()
