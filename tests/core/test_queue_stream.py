"""A long queue is never held in memory: profiles, the stored queue and the engine stream it.

10 000 queued jobs as a profile's ``repeats``: loading, preflight and storing them make
no object per job (a few configurations and one bulk insert), and the engine reads
the queue from the database one job at a time. Memory is measured with tracemalloc
(Python objects only, not SQLite's cache): one JobSpec, its row or its JSON per job
would be megabytes.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from dltop.jobs import campaign
from dltop.jobs.engine import Engine
from dltop.jobs.events import CampaignStarted, EngineEvent, RunFinished
from dltop.profiles.joblist import JobList
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.store.rows import job_row

T = TypeVar("T")

QUEUED = 10_000
PROFILE = """
[[matrix]]
frameworks = ["command"]
models = ["a", "b"]
batch_sizes = [1]
devices = ["cpu:1"]
warmup = 0
iterations = 1
repeats = {repeats}
command = ["echo", "x1"]
iteration_regex = 'x(?P<ms>[0-9.]+)'
"""

BOUND_BYTES = 3_000_000
"""Peak Python memory allowed for 10 000 jobs; one JobSpec per job alone is ~20 MB."""


def peak(fn: Callable[[], T]) -> tuple[T, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_ten_thousand_jobs_are_loaded_checked_and_stored_without_an_object_each(
        tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    text = PROFILE.format(repeats=QUEUED // 2)

    def queue() -> tuple[int, campaign.Plan]:
        plan = campaign.preflight([parse(text, "p.toml", "p", profile_dir=tmp_path)], 0, False)
        return campaign.store_plan(store, plan, ["dltop", "run", "p.toml"]), plan

    (cid, plan), used = peak(queue)
    assert used < BOUND_BYTES, f"{used / 1e6:.1f} MB to queue {QUEUED} jobs"
    assert isinstance(plan.jobs, JobList) and len(plan.jobs) == QUEUED
    assert [len(c) for c, _ in plan.jobs.blocks] == [2]  # two configurations, not 10 000 jobs
    assert store.queue.queued_count(cid) == QUEUED
    rows = list(store.db.query("select id, position, repeat, model, s.spec_json from jobs j "
                               "join job_specs s on s.job_id = j.id order by position"))
    assert [r["position"] for r in rows] == list(range(QUEUED))
    assert [r["id"] for r in rows] == list(range(1, QUEUED + 1))
    # Passes are the outer loop: a, b, a, b... with the repeat index rising per pass.
    assert [(r["model"], r["repeat"]) for r in rows[:4]] == [("a", 0), ("b", 0), ("a", 1),
                                                             ("b", 1)]
    # Each row is what the per-job path stores, its key and spec held once per
    # configuration (job_templates) and read back whole through job_specs.
    for k in (0, 1, 2, 7, QUEUED - 1):
        job = plan.jobs[k]
        assert job.repeat == k // 2 and json.loads(rows[k]["spec_json"])["repeat"] == k // 2
        assert JobSpec.from_json_dict(json.loads(rows[k]["spec_json"])) == job
        stored = dict(next(store.db.query("select j.*, s.config_key as key from jobs j join "
                                          "job_specs s on s.job_id = j.id where position = ?",
                                          [k])))
        assert (stored["config_key"], stored["spec_json"], stored["key"]) == \
            (None, None, job.config_key)
        full = job_row(cid, k, "queued", job)
        del full["config_key"], full["spec_json"]
        assert {c: stored[c] for c in full} == full
    # two templates, not 10 000 specs; one job_configs row per configuration
    assert store.db.execute("select count(*) from job_templates").fetchone()[0] == 2
    assert sorted(r[0] for r in store.db.execute("select jobs from job_configs")) == \
        [QUEUED // 2, QUEUED // 2]


def test_the_engine_starts_a_long_queue_without_reading_it(tmp_path: Path) -> None:
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([parse(PROFILE.format(repeats=QUEUED // 2), "p.toml", "p",
                                     profile_dir=tmp_path)], 0, False)
    cid = campaign.store_plan(store, plan, ["dltop", "run", "p.toml"])
    del plan
    events: list[EngineEvent] = []
    engine: Engine

    def on_event(e: EngineEvent) -> None:
        events.append(e)
        if isinstance(e, RunFinished):
            engine.request_stop()  # the first run is enough; the rest is cancelled

    engine = Engine(store, cid, "p", logs_dir=tmp_path / "runs", db_label="t",
                    on_event=on_event)
    status, used = peak(lambda: asyncio.run(engine.run()))
    assert status == "cancelled"
    assert used < BOUND_BYTES, f"{used / 1e6:.1f} MB for an engine over {QUEUED} jobs"
    started = [e for e in events if isinstance(e, CampaignStarted)]
    assert [e.n_jobs for e in started] == [QUEUED]
    assert engine.counts == {"ok": 1, "cancelled": QUEUED - 1}
    assert store.queue.queued_count(cid) == 0


def test_a_job_list_reads_like_the_tuple_of_its_jobs() -> None:
    prof = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r", "lstm"]\n'
                 'batch_sizes = [8]\ndevices = ["cpu:1"]\nrepeats = 3\n'
                 '[[matrix]]\nframeworks = ["torch"]\nmodels = ["alexnet-r"]\n'
                 'batch_sizes = [4, 8]\ndevices = ["cpu:1"]\n', "p.toml", "p")
    jobs = prof.jobs
    assert isinstance(jobs, JobList)
    made = tuple(jobs)
    assert [(j.model, j.batch_size, j.repeat) for j in made] == [
        ("fcn-r", 8, 0), ("lstm", 8, 0), ("fcn-r", 8, 1), ("lstm", 8, 1), ("fcn-r", 8, 2),
        ("lstm", 8, 2), ("alexnet-r", 4, 0), ("alexnet-r", 8, 0)]
    assert [jobs[k] for k in range(-len(made), len(made))] == list(made * 2)
    assert jobs[2:7:2] == made[2:7:2] and jobs == made and jobs == list(made)
    assert JobList.of(made) == jobs and hash(JobList.of(made)) == hash(jobs)
    assert JobList.concat([jobs, JobList.of(made[:1])]) == made + made[:1]
    assert made[2].config_key == made[0].config_key  # repeats of one configuration
    assert jobs != made[:-1] and jobs != made[::-1]
    with pytest.raises(IndexError):
        jobs[len(made)]
