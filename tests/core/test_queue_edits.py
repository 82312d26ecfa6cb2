"""Editing the queue while a real engine runs it: order, removal, cancel one run, append."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.store.rows import utc_now

from .test_control import command_toml, query, start, wait_for

pytestmark = pytest.mark.slow


def store(tmp_path: Path) -> Store:
    return Store(connect(tmp_path / "d.db", create=False))


def test_engine_follows_edits_made_while_it_runs(tmp_path: Path) -> None:
    # a, b, c in that order (command jobs, tests/programs/steps.py: the engine is under
    # test); c runs after the edits, so 3 iterations are enough
    proc = start(tmp_path, iterations=400, models='["a", "b"]',
                 extra='[[matrix]]\nframeworks = ["command"]\nmodels = ["c"]\n'
                       'batch_sizes = [2]\ndevices = ["cpu:1"]\niterations = 3\nwarmup = 1\n'
                       'timeout_s = 300\n' + command_toml() + "\n")
    try:
        first = wait_for(proc, "iteration")
        s = store(tmp_path)
        edit = s.edits
        ids = [r["id"] for r in s.db.query("select id from jobs order by position")]
        assert edit.move_job(ids[2], -1).changed == 1  # c before b
        assert edit.remove_job(ids[1]).changed == 1  # and b is removed
        assert edit.remove_job(ids[0]).changed == 0  # the running job is not
        more = parse('[[matrix]]\nframeworks = ["command"]\nmodels = ["d"]\n'
                     'batch_sizes = [4]\ndevices = ["cpu:1"]\niterations = 2\nwarmup = 0\n'
                     + command_toml() + "\n", "more.toml", "more")
        assert not edit.append_jobs(1, more.jobs, "more.toml").needs_engine
        edit.cancel_run(1, int(first["run_id"]))  # cancel the current run only
        proc.communicate(timeout=300)  # drain stdout so the engine never blocks on it
    finally:
        if proc.poll() is None:
            proc.kill()
    runs = query(tmp_path, "select j.model, r.status from runs r join jobs j on j.id = r.job_id "
                           "order by r.id")
    assert runs == [("a", "cancelled"), ("c", "ok"), ("d", "ok")]
    assert query(tmp_path, "select status from jobs order by id") == [
        ("cancelled",), ("removed",), ("ok",), ("ok",)]
    assert query(tmp_path, "select status from campaigns") == [("finished",)]


def test_append_to_a_finished_campaign_reopens_it_for_a_new_engine(tmp_path: Path) -> None:
    proc = start(tmp_path, iterations=2)
    proc.wait(timeout=300)
    s = store(tmp_path)
    prof = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                 'batch_sizes = [4]\ndevices = ["cpu:1"]\n', "x.toml", "x")
    res = s.edits.append_jobs(1, prof.jobs, "x.toml")
    assert res.changed == 1 and res.needs_engine
    assert query(tmp_path, "select status, finished_at from campaigns") == [("queued", None)]
    # An engine finishing at that moment would not close the campaign over a queued job.
    assert not s.queue.finish_if_drained(1, "finished", utc_now())
