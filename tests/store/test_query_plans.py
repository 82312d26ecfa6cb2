"""Every query the engine, the store, the viewers and the exports issue uses an index.

The statements are not listed by hand: a scenario drives the real functions
(every public method of the store's repositories, the live viewer's reads, every
results table) on a migrated, populated database while ``set_trace_callback``
records what reaches SQLite; each distinct statement is then explained with
``EXPLAIN QUERY PLAN``. A full scan of a table that grows with the campaigns
(``jobs``, ``runs``, ``iterations``, the sample tables) fails the test, naming the
statement and its plan. A new store method fails it too until the scenario calls it,
so a new query cannot slip past unexplained.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlite_utils

from dltop.catalog import CampaignStatus, JobStatus, RunStatus
from dltop.errors import UserError
from dltop.live.campaign import read_campaign
from dltop.live.campaign_metrics import read_campaigns
from dltop.live.eta import eta_inputs
from dltop.live.metrics import campaign_runs
from dltop.profiles.loader import parse
from dltop.results import compare, export, queries, scaling
from dltop.store import Store, memory_db
from dltop.store.edit import Edits
from dltop.store.queue import Queue, RunProcess
from dltop.store.read.jobs import status_counts
from dltop.store.retention import Retention
from dltop.store.telemetry import TelemetryWriter
from dltop.telemetry.values import RunTelemetry
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

GROWING = ("jobs", "runs", "iterations", "gpu_samples", "host_samples", "environment",
           "evals", "profile_ops", "generations")
"""Tables whose rows grow with campaigns, runs and time: never scanned whole."""

PROFILE = """
[[matrix]]
frameworks = ["torch", "tensorflow"]
models = ["fcn-r"]
batch_sizes = [8, 16]
devices = ["cpu:1", "cpu:2", "gpu:1"]
"""


def _populate(store: Store, n_campaigns: int = 3) -> list[int]:
    """Campaigns of finished, running and queued jobs with iterations and telemetry."""
    jobs = parse(PROFILE, "p.toml", "p").jobs
    cids = []
    for c in range(n_campaigns):
        cid = store.create_campaign(f"c{c}", ["p.toml"], ["dltop"], "host", 1, None)
        ids = store.add_jobs(cid, jobs)
        for k, job_id in enumerate(ids[:6]):
            run_id = store.start_run(job_id, cid, 1, "", 8)
            store.add_iterations(run_id, [{"idx": i, "seconds": 0.1 + i / 1000, "samples": 8,
                                           "warmup": int(i < 2), "loss": 1.0}
                                          for i in range(12)])
            store.telemetry.write_batch(_batch(run_id))
            if k < 5:
                store.finish_run(run_id, job_id, RunStatus.OK if k % 3 else RunStatus.CRASHED,
                                 {"median_s": 0.1, "samples_per_s": 80.0, "cv": 0.01,
                                  "noisy": 0, "n_iterations": 10})
                store.telemetry.write_run_telemetry(run_id, RunTelemetry(power_mean_w=100.0))
                store.record_environment(run_id, {"host": "host", "framework": "torch",
                                                  "python_executable": "/usr/bin/python3"})
        cids.append(cid)
    return cids


def _batch(run_id: int) -> Batch:
    return Batch(tuple(GpuWindow(run_id, t / 2, 0, 5, 50.0, 40.0, 60.0, 2**30, 100.0, 90.0,
                                 110.0, 50.0, 60.0, 1500.0, True, 1e9 + t)
                       for t in range(4)),
                 tuple(HostWindow(run_id, t / 2, 1, 30.0, 90.0, 2**32, 0, 95.0, 2**28, 1e9 + t)
                       for t in range(4)))


def _repositories(store: Store) -> Iterator[tuple[str, object]]:
    yield "Store", store
    yield "Queue", store.queue
    yield "Edits", store.edits
    yield "TelemetryWriter", store.telemetry
    yield "Retention", store.retention


def _public_methods(cls: type) -> set[str]:
    return {n for n, f in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


class Recorder:
    """The store's public methods that ran, and the SQL statements that reached SQLite."""

    def __init__(self, store: Store) -> None:
        self.statements: dict[str, str] = {}  # normalised -> first seen, as executed
        self.called: set[str] = set()
        self._store = store
        for cls_name, obj in _repositories(store):
            for name in _public_methods(type(obj)):
                setattr(obj, name, self._wrap(f"{cls_name}.{name}", getattr(obj, name)))

    def _wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def called(*args: Any, **kwargs: Any) -> Any:
            self.called.add(label)
            return fn(*args, **kwargs)
        return called

    def trace(self, sql: str) -> None:
        text = sql.strip()
        if re.match(r"(?is)^(with|select|insert|update|delete|replace)\b", text):
            # one entry per statement shape: literals differ from call to call
            shape = re.sub(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", "?", text)
            self.statements.setdefault(re.sub(r"\s+", " ", shape), text)


def _scenario(store: Store, cids: list[int]) -> None:
    """What the engine, a resuming engine, a viewer's edits and the readers do."""
    db, queue, cid = store.db, store.queue, cids[-1]
    jobs = parse(PROFILE, "p.toml", "p").jobs
    # the engine, one job
    store.set_campaign_status(cid, CampaignStatus.RUNNING)
    for room in ((None, None), (1, 0), (0, 2), (0, 0)):
        queue.next_startable(cid, *room, {1, 2})
    found = queue.next_startable(cid, None, None)
    assert found is not None
    job_id = found[0]
    queue.queued_spec(job_id)
    queue.set_waiting(cid, "cpu-0 held")
    queue.set_waiting(cid, None)
    queue.progress(cid)
    queue.queued_count(cid)
    run_id = store.start_run(job_id, cid, queue.next_attempt(job_id), "", 8)
    store.update_run(run_id, {"pid": 1, "pgid": 1})
    store.add_iterations(run_id, [{"idx": 0, "seconds": 0.1, "samples": 8, "warmup": 1,
                                   "loss": None}])
    store.telemetry.write_batch(_batch(run_id))
    nodes = _batch(run_id)
    store.telemetry.add_agent_samples(run_id, "node-b", nodes.gpu, nodes.host)  # a Slurm run
    store.update_run(run_id, {"plan_iterations": 12})
    store.add_evals(run_id, [{"idx": 0, "epoch": 0.5, "accuracy": 0.5, "eval_s": 0.1,
                              "train_s": 1.0, "samples": 100}])
    store.set_profile(run_id, {"profile_steps": 5, "profile_step_ms": 10.0,
                               "profile_device": "cpu"},
                      [{"name": "aten::mm", "calls": 10, "self_cpu_ms": 20.0, "total_ms": 25.0,
                        "share_pct": 40.0}])
    store.add_generations(run_id, [{"idx": 0, "warmup": 0, "ttft_s": 0.05, "e2e_s": 0.1,
                                    "prompt_tokens": 8, "new_tokens": 2, "batch": 1,
                                    "itl_s": b"\0" * 8}])
    store.add_serve_requests(run_id, [{"idx": 0, "request": 0, "warmup": 0, "scheduled_s": 0.0,
                                       "dispatch_lag_s": 0.0, "slot_wait_s": 0.0,
                                       "ttft_s": 0.05, "e2e_s": 0.1, "status": 200,
                                       "output_tokens": 2, "tokens_estimated": 0,
                                       "chunk_s": b"\0" * 16, "chunk_tokens": b"\0" * 8}])
    queue.take_cancel_run(cid)
    store.edits.cancel_run(cid, run_id)
    queue.take_cancel_run(cid)
    queue.control(cid)
    queue.packs(cid)
    # a viewer meanwhile
    queued = [j for j, _, _ in queue.queued_devices(cid)]
    store.edits.move_job(queued[1], -1)
    store.edits.remove_job(queued[2])
    store.edits.append_jobs(cid, jobs[:2], "more.toml")
    store.set_control(cid, "pause")
    read_campaign(db, cid)
    campaign_runs(db, cid, "c")  # the Prometheus exporter's read
    read_campaigns(db, None, {})  # ... and its campaign series
    # the run ends; another engine resumes a dead one
    store.finish_run(run_id, job_id, RunStatus.OK, {"median_s": 0.1})
    eta_inputs(db, cid, {"plan-check": 1})  # the campaign ETA's sums (read with an engine)
    store.telemetry.write_run_telemetry(run_id, RunTelemetry(telemetry_simulated=True))
    store.telemetry.finish_node_run(run_id, 8)
    store.record_environment(run_id, {"host": "host", "framework": "torch"})
    store.set_job_status(queued[3], JobStatus.RUNNING)
    queue.open_campaigns()
    for run in queue.running_runs(cids[0]):
        queue.mark_lost_and_requeue(RunProcess(run.run_id, run.job_id, None, None, None))
    queue.requeue_running_jobs(cid)
    store.fence(cid)  # the engine that made it owns it: its writes are fenced from now on
    queue.has_generation()
    queue.claim(cid, 2, 1.0, (1, None), "login2")
    queue.heartbeat(cid, 2, "login2")
    queue.queued_jobs(cid)
    store.edits.retry_failed(cids[0])
    queue.cancel_queued(cids[1])
    queue.cancelled_campaigns()  # what --resume of a cancelled campaign reads and writes
    queue.requeue_cancelled_jobs(cids[1])
    queue.finish_if_drained(cids[1], CampaignStatus.FINISHED, "now")
    with store.checkpoint_later(), store.transaction():
        store.add_jobs(cid, jobs[:1], [RunStatus.UNSATISFIABLE])
    store.create_campaign("empty", ["p.toml"], ["dltop"], "host", 1, None)
    # the readers: listings, status, every table of every campaign
    queries.recent_runs(db, 30)
    queries.recent_runs(db, 30, cid)
    status_counts(db, cid)
    queries.current_runs(db, cid)
    queries.resolve_campaigns(db, "all")
    queries.resolve_campaigns(db, "c1,latest,2")
    for metric in export.METRICS:
        export.build_table(db, cids[0], metric)
    for table in export.TABLES:
        if table in ("slo", "overhead"):  # serve campaigns only: refused here, after its read
            with pytest.raises(UserError, match="no serve runs"):
                export.results_table(db, ",".join(map(str, cids)), table, run=run_id)
            continue
        export.results_table(db, ",".join(map(str, cids)), table, run=run_id)
    scaling.scaling_rows(db, cids[0])
    compare.compare(db, cids[0], cids[1])
    # a storage failure, the end-of-run checkpoint, then dltop prune of ended campaigns
    store.checkpoint()
    store.fail_campaign(cid, "disk full")
    queue.failed_campaigns()
    ret = store.retention
    ret.ended_campaigns("2999-01-01T00:00:00")
    ended = ret.ended_campaigns()
    runs = ret.runs_of(ended)
    ret.count_raw(runs)
    ret.table_bytes()
    for run_id in runs[:2]:
        ret.prune_run(run_id)
    ret.count_idle_samples(1e12)
    ret.prune_idle_samples(1e12)
    ret.delete_campaign(ended[-1])


def _plan(db: sqlite_utils.Database, sql: str) -> list[str]:
    return [r[3] for r in db.conn.execute(f"explain query plan {sql}")]


def _aliases(sql: str) -> dict[str, str]:
    """Name in a plan (the table or its alias) → table, for the growing tables."""
    names = {t: t for t in GROWING}
    for m in re.finditer(rf"\b({'|'.join(GROWING)})\s+(?:as\s+)?([a-z_]\w*)", sql, re.I):
        if m.group(2).lower() not in {"where", "on", "join", "left", "order", "group",
                                      "set", "limit", "using", "values", "select"}:
            names[m.group(2)] = m.group(1)
    return names


def _bounded(sql: str, plan: list[str]) -> bool:
    """A scan a ``LIMIT`` stops: no filter, and rows come in scan order (no sorting)."""
    text = sql.lower()
    return (re.search(r"\blimit\b", text) is not None and " where " not in text
            and not any("TEMP B-TREE" in line for line in plan))


def full_scans(db: sqlite_utils.Database, sql: str) -> list[str]:
    """Plan lines of ``sql`` that read a growing table whole (with or without an index).

    The newest rows by id (``order by r.id desc limit 30``) walk the table backwards and
    stop at the limit: a scan in the plan, but not a full one.
    """
    names = _aliases(sql)
    plan = _plan(db, sql)
    if _bounded(sql, plan):
        return []
    return [line for line in plan
            if (m := re.match(r"SCAN (\w+)", line)) and m.group(1) in names]


@pytest.fixture
def recorded() -> tuple[sqlite_utils.Database, Recorder]:
    db = memory_db()
    store = Store(db)
    cids = _populate(store)
    rec = Recorder(store)
    db.conn.set_trace_callback(rec.trace)
    try:
        _scenario(store, cids)
    finally:
        db.conn.set_trace_callback(None)
    return db, rec


def test_the_scenario_calls_every_store_method(
        recorded: tuple[sqlite_utils.Database, Recorder]) -> None:
    _, rec = recorded
    every = {f"{name}.{m}" for name, cls in (("Store", Store), ("Queue", Queue),
                                             ("Edits", Edits),
                                             ("TelemetryWriter", TelemetryWriter),
                                             ("Retention", Retention))
             # VACUUM rewrites the file: no query plan to check
             for m in _public_methods(cls)} - {"Store.transaction", "Retention.vacuum"}
    assert every - rec.called == set(), "add the new store methods to _scenario"


def test_no_hot_query_scans_a_growing_table(
        recorded: tuple[sqlite_utils.Database, Recorder]) -> None:
    db, rec = recorded
    assert len(rec.statements) > 40  # the scenario really reached SQLite
    found = {sql: bad for sql in rec.statements.values() if (bad := full_scans(db, sql))}
    assert found == {}, "\n\n".join(f"{sql}\n  -> {bad}" for sql, bad in found.items())


def test_the_check_sees_a_full_scan() -> None:
    db = memory_db()
    assert full_scans(db, "select count(*) from gpu_samples g where g.simulated = 1") \
        == ["SCAN g"]
    assert full_scans(db, "select * from jobs where status = 'queued'")
    assert full_scans(db, "select id from jobs where campaign_id = 1 and status = 'queued' "
                          "order by position limit 1") == []
    assert full_scans(db, "select id from runs order by id desc limit 3") == []
    assert full_scans(db, "select id from runs order by error_kind limit 3") == ["SCAN runs"]
