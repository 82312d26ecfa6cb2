"""``dltop runs``: the listing prints stored text as written, never as Rich markup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.catalog import RunStatus
from dltop.store import connect

# gloo's error text carries brackets like these; as markup, [/...] closes a tag that was
# never opened (rich.errors.MarkupError) and [bold] would vanish into a style.
MESSAGE = "boom [/__w/pytorch/gloo.cc] [bold]x[/bold]"


def test_runs_prints_messages_verbatim(tmp_path: Path, campaigns: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "r.db"
    db = connect(db_path)
    cid, jobs = campaigns.create(db, campaigns.profile("listing", ["cpu:1"]))
    campaigns.add_run(db, cid, jobs[0][1], [0.1], status=RunStatus.CRASHED,
                      fields={"error_message": MESSAGE})
    assert cli.main(["runs", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    assert MESSAGE in out and "crashed" in out


def test_runs_shows_the_cause_and_the_note_not_the_log_path(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "r.db"
    db = connect(db_path)
    cid, jobs = campaigns.create(db, campaigns.profile("listing", ["cpu:1", "cpu:2"]))
    crash = ("command 'python' exited with status 1 after 0 iterations; last output lines:\n"
             "  RuntimeError: out of data\nlog: /tmp/x-runs/run-1/runner.log")
    campaigns.add_run(db, cid, jobs[0][1], [0.1], status=RunStatus.CRASHED,
                      fields={"error_message": crash})
    campaigns.add_run(db, cid, jobs[1][1], [0.1, 0.1], fields={
        "note": "protocol errors (2), first: iter seconds -6.2 not in (0, 1e6]"})
    assert cli.main(["runs", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    assert "exit status 1: RuntimeError: out of data" in out and "runner.log" not in out
    assert "protocol errors (2)" in out


def test_runs_shows_dltops_reason_when_the_program_ran_fine(
        tmp_path: Path, campaigns: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # A regex that never matched a Keras bar: the bar's last redraw is no cause.
    db_path = tmp_path / "r.db"
    db = connect(db_path)
    cid, jobs = campaigns.create(db, campaigns.profile("listing", ["cpu:1"]))
    crash = ("iteration_regex 'took (?P<ms>[0-9]+)' never matched any output line of the "
             "command; last output lines:\n  12/12 ━━━━ 1s 2ms/step - loss: 0.7189\n"
             "log: /tmp/x-runs/run-1/runner.log")
    campaigns.add_run(db, cid, jobs[0][1], [0.1], status=RunStatus.CRASHED,
                      fields={"error_message": crash})
    # the kernel's OOM killer: the program's last line is a progress line, not a cause
    killed = ("command 'python' was killed by signal SIGKILL after 5 iterations; last "
              "output lines:\n  step 5 took 0.01 s\nlog: /tmp/x-runs/run-2/runner.log")
    campaigns.add_run(db, cid, jobs[0][1], [0.1], status=RunStatus.CRASHED,
                      fields={"error_message": killed})
    assert cli.main(["runs", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    assert "never matched" in out and "loss: 0.7189" not in out
    assert "killed by signal SIGKILL" in out and "step 5 took" not in out


def test_runs_states_once_what_every_row_repeats(tmp_path: Path, campaigns: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The exports' rule in the listing: campaign, framework, model and batch the same on
    every run go to the constant line; a device that varies stays a column; figures no
    run has (every run crashed: ``-``) are left out and named once."""
    db_path = tmp_path / "s.db"
    db = connect(db_path)
    cid, jobs = campaigns.create(db, campaigns.profile("same", ["cpu:1", "cpu:2"]))
    for _, job_id in jobs:
        campaigns.add_run(db, cid, job_id, [0.1], status=RunStatus.CRASHED,
                          fields={"error_message": "boom"})
    db.close()
    assert cli.main(["runs", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert header.split() == ["run", "started", "status", "device", "rep", "note"], header
    flat = " ".join(out.split())
    assert "constant: campaign 1, framework torch, model fcn-r, batch 8, precision fp32" in flat
    assert "not shown, none in any row: n iters, median s, samples/s, cv" in flat
    assert "cpu:2" in out and "boom" in out
