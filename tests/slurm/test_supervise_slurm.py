"""supervise_slurm on its own, against the real single-node Slurm, with a stand-in runner.

The stand-in writes protocol events to ``$DLTOP_EVENT_FD`` as a runner does; it shows
the events file carrying them from the node to the engine and the hooks' calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from dltop.catalog import RunStatus
from dltop.jobs.executors.slurm import supervise_slurm
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.profiles.loader import parse

from .cluster import NODE, LocalSlurm

PROFILE = """
name = "c"
[defaults]
iterations = 2
timeout_s = 120
executor = "slurm"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
"""

EVENTS = [{"v": 1, "event": "iter", "index": i, "seconds": 0.01, "samples": 8,
           "warmup": False} for i in range(2)] + [{"v": 1, "event": "done"}]
STAND_IN = ("import json, os, sys; fd = int(os.environ['DLTOP_EVENT_FD']); "
            "[os.write(fd, (json.dumps(e) + '\\n').encode()) for e in json.loads(sys.argv[1])]; "
            "sys.exit(int(sys.argv[2]))")


def run(tmp_path: Path, exit_code: int) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]],
                                                 list[bool]]:
    (job,) = parse(PROFILE, "c.toml", "c", logical_cores=2).jobs
    (tmp_path / "runner.log").touch()
    files = SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")
    events: list[dict[str, Any]] = []
    states: list[dict[str, Any]] = []
    polls: list[bool] = []

    async def poll(final: bool) -> None:
        polls.append(final)

    async def main() -> Any:
        return await supervise_slurm(
            job, 5, [sys.executable, "-c", STAND_IN, json.dumps(EVENTS), str(exit_code)],
            files=files, env=dict(os.environ), on_event=events.append, stop=asyncio.Event(),
            on_state=states.append, on_agent_poll=poll)

    return asyncio.run(main()), events, states, polls


def test_events_cross_through_the_file_and_the_hooks_are_called(slurm_env: LocalSlurm,
                                                                 tmp_path: Path) -> None:
    outcome, events, states, polls = run(tmp_path, 0)
    assert outcome.status == RunStatus.OK, outcome
    assert [e["event"] for e in events] == ["iter", "iter", "done"]
    assert states[0].keys() == {"slurm_job_id", "log_path", "submitted_at"}
    assert any(s.get("slurm_nodes") == NODE for s in states)
    # the run starts when the job does: its time in the queue is apart, never negative
    (started,) = [s for s in states if "started_at" in s]
    assert started["started_at"] >= states[0]["submitted_at"] and started["queue_s"] >= 0
    # no accounting on the test cluster: said, not guessed
    (acct,) = [s for s in states if "slurm_acct_note" in s]
    assert acct["slurm_acct_note"] == "no accounting (Slurm accounting storage is disabled)"
    assert acct["slurm_max_rss_bytes"] is None and acct["slurm_energy_j"] is None
    assert 0 < outcome.wall_s < 60
    assert polls[-1] is True and polls.count(True) == 1 and False in polls


def test_a_runner_failing_after_done_is_crashed_naming_the_slurm_state(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    outcome, *_ = run(tmp_path, 3)
    assert outcome.status == RunStatus.CRASHED
    assert outcome.exit_code == 3
    assert outcome.message.startswith("runner reported done but exited with status 3 (Slurm job ")
    assert outcome.message.endswith(" FAILED)")
