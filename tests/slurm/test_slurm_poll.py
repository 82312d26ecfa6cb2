"""Polite polling (issue 33, item 5): one ``squeue`` for all of an engine's jobs per poll,
back-off while they pend, and what ``squeue`` and ``sacct`` answers mean.

The poller's own tests put a ``squeue`` script first on PATH (a real process whose
answer a file sets), so the back-off is seen in milliseconds; the real cluster's
test is test_slurm_live.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from dltop.jobs.executors import slurm_poll
from dltop.jobs.executors.slurm_acct import parse_sacct_usage, rss_bytes
from dltop.jobs.executors.slurm_poll import JobInfo, SqueuePoller, parse_squeue_jobs, slurm_time

SQUEUE = """#!/bin/sh
echo "$*" >> {log}
cat {answer}
"""


def test_squeue_lines_are_parsed_with_slurm_s_times() -> None:
    out = ("12|RUNNING|None|dltop-n1|2026-11-26T16:26:33|2026-11-26T16:26:38\n"
           "13|PENDING|Resources||2026-11-26T16:26:34|2026-11-26T16:40:00\n"
           "garbage\n")
    got = parse_squeue_jobs(out)
    assert set(got) == {"12", "13"}
    run, wait = got["12"], got["13"]
    assert (run.state, run.reason, run.nodes) == ("RUNNING", None, "dltop-n1")
    assert run.started_s is not None and run.submitted_s is not None
    assert run.started_s - run.submitted_s == 5
    # a pending job's start time is Slurm's guess, not a start
    assert (wait.state, wait.reason, wait.nodes, wait.started_s) == (
        "PENDING", "Resources", None, None)
    assert slurm_time("N/A") is None and slurm_time("Unknown") is None


def test_sacct_usage_takes_the_allocation_s_line_and_the_largest_step_rss() -> None:
    out = ("41|COMPLETED|95||5230\n41.batch|COMPLETED|95|2048K|0\n"
           "41.0|COMPLETED|90|1.5G|0\n41.extern|COMPLETED|95|0|0\n")
    got = parse_sacct_usage(out, "41")
    assert got is not None
    assert got.max_rss_bytes == int(1.5 * 2**30) and got.elapsed_s == 95
    assert got.energy_j == 5230 and got.note is None
    bare = parse_sacct_usage("41|COMPLETED|95||0\n", "41")  # no plugins gather anything
    assert bare is not None and bare.max_rss_bytes is None and bare.energy_j is None
    assert bare.note == ("no energy (no acct_gather_energy plugin); "
                         "no MaxRSS (no jobacct_gather plugin)")
    assert parse_sacct_usage("", "41") is None  # not recorded yet
    assert rss_bytes("") is None and rss_bytes("512") == 512 and rss_bytes("3M") == 3 * 2**20


def test_one_squeue_answers_every_job_and_backs_off_while_all_pend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_poll, "POLL_S", 0.01)
    monkeypatch.setattr(slurm_poll, "BACKOFF_MAX_S", 0.08)
    log, answer = tmp_path / "calls", tmp_path / "answer"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "squeue"
    script.write_text(SQUEUE.format(log=log, answer=answer))
    script.chmod(0o755)
    pending = "|PENDING|Priority||2026-11-26T16:26:33|N/A\n"
    answer.write_text(f"7{pending}8{pending}")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    async def main() -> tuple[list[float], list[float], object, object]:
        poller = slurm_poll.poller_for(env)
        assert slurm_poll.poller_for(env) is poller  # the engine's one poller
        poller.watch("7")
        poller.watch("8")
        waits = []
        for _ in range(5):
            got = await poller.next("7")
            assert isinstance(got, JobInfo) and got.state == "PENDING"
            waits.append(poller.interval_s)
        answer.write_text("7|RUNNING|None|n1|2026-11-26T16:26:33|2026-11-26T16:26:40\n"
                          f"8{pending}")
        await poller.next("8")
        await poller.next("8")
        after = [poller.interval_s]
        poller.unwatch("8")
        answer.write_text("")  # job 7 forgotten by the controller
        gone = await poller.next("7")
        poller.unwatch("7")
        return waits, after, gone, poller

    t0 = time.monotonic()
    waits, after, gone, poller = asyncio.run(main())
    assert time.monotonic() - t0 < 10
    assert waits == [0.02, 0.04, 0.08, 0.08, 0.08]  # doubled up to the cap
    assert after == [0.01]  # a job running: back to the short interval
    assert gone is None
    calls = log.read_text().splitlines()
    assert isinstance(poller, SqueuePoller) and poller.calls == len(calls)
    # one call for both jobs at a time, never one per job
    assert all(c == "-h -t all -j 7,8 -o %i|%T|%r|%N|%V|%S" for c in calls[:6]), calls
    assert calls[-1] == "-h -t all -j 7 -o %i|%T|%r|%N|%V|%S"
