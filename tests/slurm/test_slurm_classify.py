"""How a Slurm job's end state decides the run's status (pure: no cluster).

Slurm's OUT_OF_MEMORY, TIMEOUT and node failures cannot all be provoked on one
node here (the real NODE_FAIL is in test_slurm_runs.py); the rules are checked
on the reader's state directly.
"""

from __future__ import annotations

import json

import pytest

from dltop.catalog import RunStatus
from dltop.jobs.eventreader import EventReader
from dltop.jobs.executors.slurm import classify


def reader(*events: dict[str, object]) -> EventReader:
    r = EventReader(lambda e: None)
    for e in events:
        r.handle(json.dumps({"v": 1, **e}).encode())
    return r


DONE: tuple[dict[str, object], ...] = (
    {"event": "iter", "index": 0, "seconds": 0.1, "samples": 8, "warmup": False},
    {"event": "done"})


@pytest.mark.parametrize("state,status,text", [
    ("NODE_FAIL", RunStatus.CRASHED, "Slurm job 9 ended NODE_FAIL (boom)"),
    ("PREEMPTED", RunStatus.CRASHED, "Slurm job 9 ended PREEMPTED (boom)"),
    ("OUT_OF_MEMORY", RunStatus.OOM, "Slurm job 9 ran out of memory (OUT_OF_MEMORY)"),
    ("TIMEOUT", RunStatus.TIMEOUT, "Slurm job 9 reached its time limit (TIMEOUT)"),
    ("CANCELLED", RunStatus.CANCELLED, "Slurm job 9 was cancelled outside dltop"),
    ("FAILED", RunStatus.CRASHED,
     "runner exited with status 1 without a 'done' event (Slurm job 9 FAILED)"),
])
def test_slurm_end_states_without_a_runner_verdict(state: str, status: RunStatus,
                                                   text: str) -> None:
    got = classify(None, state, "boom", "9", 1, reader(), 60.0)
    assert (got[0], got[2]) == (status, text)


def test_the_runner_s_own_verdict_wins() -> None:
    assert classify(None, "COMPLETED", None, "9", 0, reader(*DONE), 60.0)[0] == RunStatus.OK
    oom = reader({"event": "error", "kind": "oom", "message": "CUDA out of memory"})
    assert classify(None, "NODE_FAIL", None, "9", 1, oom, 60.0)[:2] == (RunStatus.OOM, "oom")


def test_dltop_s_own_cancel_and_timeout_are_kept() -> None:
    assert classify(RunStatus.CANCELLED, "CANCELLED", None, "9", 0, reader(), 60.0)[0] \
        == RunStatus.CANCELLED
    got = classify(RunStatus.TIMEOUT, "CANCELLED", None, "9", 0, reader(), 60.0)
    assert got[0] == RunStatus.TIMEOUT and got[2] == "no result within timeout_s = 60"
