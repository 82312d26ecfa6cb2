"""Fault 5 (issue 20): planted symlinks in ``<db stem>-runs/`` are never followed, and
what dltop stores is readable by its user only.

Each case runs real ``dltop run`` processes on a ``command`` job (a Python program
reporting through ``dltop_report``), as the fault campaign did.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs import rundir
from dltop.procs import read_log_tail

PROGRAM = ("from dltop_report import step\n"
           "for _ in range(4):\n"
           "    with step(samples=8):\n"
           "        pass\n")


def _profile(tmp_path: Path, jobs: int = 1) -> Path:
    prof = tmp_path / "p.toml"
    models = json.dumps([f"m{i}" for i in range(jobs)])
    prof.write_text(f'[[matrix]]\nframeworks = ["command"]\nmodels = {models}\n'
                    'batch_sizes = [8]\ndevices = ["cpu:1"]\nwarmup = 1\niterations = 3\n'
                    f'timeout_s = 60\ncommand = {json.dumps([sys.executable, "-c", PROGRAM])}\n')
    return prof


def _run(tmp_path: Path, db: Path, jobs: int = 1) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dltop", "run", str(_profile(tmp_path, jobs)), "--db", str(db),
         "--headless", "--no-telemetry"], capture_output=True, text=True, timeout=240,
        preexec_fn=lambda: os.umask(0o022))


def _runs(db: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(
            "select id, status, error_kind, error_message, log_path from runs order by id")]
    finally:
        conn.close()


def _victim(tmp_path: Path, name: str) -> Path:
    victim = tmp_path / name
    victim.write_text("precious\n")
    victim.chmod(0o644)
    return victim


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.mark.slow
def test_planted_spec_and_log_links_are_never_written_through(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    spec_victim, log_victim = _victim(tmp_path, "victim1"), _victim(tmp_path, "victim2")
    stale = tmp_path / "d-runs" / "run-1"
    stale.mkdir(parents=True)
    (stale / "spec.json").symlink_to(spec_victim)
    (stale / "runner.log").symlink_to(log_victim)

    res = _run(tmp_path, db)
    assert res.returncode == 0, res.stderr
    # before: spec.json's JSON overwrote victim1, the program's output went into victim2
    assert spec_victim.read_text() == "precious\n" and log_victim.read_text() == "precious\n"
    assert [r["status"] for r in _runs(db)] == ["ok"]
    fresh = tmp_path / "d-runs" / "run-1"
    assert not fresh.is_symlink() and _mode(fresh) == 0o700
    for name in ("spec.json", "runner.log"):
        assert stat.S_ISREG((fresh / name).lstat().st_mode) and _mode(fresh / name) == 0o600
    assert json.loads((fresh / "spec.json").read_text())["run_id"] == 1
    # the stale folder (an earlier database's run 1) is kept aside, links and all
    aside = [p for p in (tmp_path / "d-runs").iterdir() if p.name.startswith("run-1.old-")]
    assert len(aside) == 1 and (aside[0] / "spec.json").is_symlink()


@pytest.mark.slow
def test_a_run_folder_that_is_a_link_fails_that_run_with_its_reason(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "d-runs").mkdir(mode=0o700)
    (tmp_path / "d-runs" / "run-1").symlink_to(target)

    res = _run(tmp_path, db, jobs=2)
    assert res.returncode == 1  # a crashed run
    assert list(target.iterdir()) == []
    first, second = _runs(db)
    assert (first["status"], first["error_kind"]) == ("crashed", "run_dir")
    assert "run-1: a symbolic link (to" in first["error_message"]
    assert second["status"] == "ok"  # the campaign went on
    assert "symbolic link" in res.stdout + res.stderr


def test_a_runs_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    runs = tmp_path / "d-runs"
    runs.mkdir()
    runs.chmod(0o777)
    res = _run(tmp_path, db)
    assert res.returncode == 1
    [run] = _runs(db)
    assert run["error_kind"] == "run_dir"
    assert "writable by group or others (mode 0777)" in run["error_message"]
    assert list(runs.iterdir()) == []


def test_folders_of_another_user_are_refused(tmp_path: Path) -> None:
    runs = tmp_path / "d-runs"
    runs.mkdir(mode=0o700)
    other = os.getuid() + 1
    # the runs directory is ours, not the other user's: as that user, dltop refuses it
    with pytest.raises(rundir.UnsafeRunDir, match=f"owned by uid {os.getuid()}, not you"):
        rundir.prepare_run_dir(runs, 1, {}, uid=other)
    if os.geteuid() == 0:  # a run-N of another user, for real
        (runs / "run-1").mkdir()
        os.chown(runs / "run-1", 65534, 65534)
        with pytest.raises(rundir.UnsafeRunDir, match="a folder owned by uid 65534"):
            rundir.prepare_run_dir(runs, 1, {})
    assert [p.name for p in runs.iterdir()] == (["run-1"] if os.geteuid() == 0 else [])


@pytest.mark.slow
def test_database_logs_and_folders_are_user_only_under_umask_022(tmp_path: Path) -> None:
    db = tmp_path / "new" / "d.db"
    res = _run(tmp_path, db)
    assert res.returncode == 0, res.stderr
    assert _mode(db.parent) == 0o700 and _mode(db) == 0o600
    for extra in ("d.db-wal", "d.db-shm"):
        if (db.parent / extra).exists():
            assert _mode(db.parent / extra) == 0o600, extra
    runs = db.parent / "d-runs"
    assert _mode(runs) == 0o700 and _mode(runs / "run-1") == 0o700
    assert {_mode(p) for p in (runs / "run-1").iterdir()} == {0o600}


def test_the_engine_log_of_a_detached_engine_is_user_only(tmp_path: Path) -> None:
    from dltop.jobs.start import spawn_detached

    log = tmp_path / "runs" / "engine-1.log"
    old = os.umask(0o022)
    try:
        proc = spawn_detached([sys.executable, "-c", "print('hi')"], log)
    finally:
        os.umask(old)
    assert proc.wait(timeout=60) == 0
    assert _mode(log) == 0o600 and _mode(log.parent) == 0o700
    assert log.read_text() == "hi\n"


def test_the_supervisor_never_appends_through_a_log_link(tmp_path: Path) -> None:
    import asyncio

    from dltop.jobs.supervisor import supervise

    victim = _victim(tmp_path, "victim")
    log = tmp_path / "runner.log"
    log.symlink_to(victim)
    out = asyncio.run(supervise([sys.executable, "-c", "print('x' * 100)"], env=dict(os.environ),
                                log_path=log, timeout_s=60, on_event=lambda e: None,
                                stop=asyncio.Event()))
    assert out.status == "crashed" and "cannot start runner" in out.message
    assert victim.read_text() == "precious\n"
    # and a log tail is never read through a link (it would be stored in the database)
    assert read_log_tail(log) == ""


# the database file itself (issue 38) -------------------------------------------------
def _dltop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=120, preexec_fn=lambda: os.umask(0o022))


@pytest.mark.slow
def test_a_dangling_db_link_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    # was: SQLite created the link's target, mode 0644, and the campaign ran
    link = tmp_path / "d.db"
    link.symlink_to(tmp_path / "elsewhere" / "target.db")
    (tmp_path / "elsewhere").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    res = _dltop("run", str(_profile(tmp_path)), "--db", str(link), "--headless",
                 "--no-telemetry")
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"dltop: error: {link}: a symbolic link to {tmp_path / 'elsewhere' / 'target.db'}, not "
        "a database file; dltop never opens or creates a database through a link: pass the "
        "real path")
    assert "Traceback" not in res.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "p.toml"])


def test_a_link_to_an_existing_database_is_refused_for_reading_and_writing(
        tmp_path: Path) -> None:
    from dltop.errors import UserError
    from dltop.store import connect
    from dltop.store.reader import open_reader

    real = tmp_path / "real.db"
    connect(real).conn.close()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    for open_it in (connect, lambda p: connect(p, create=False), open_reader):
        with pytest.raises(UserError, match=r"a symbolic link to .*real\.db, not a database"):
            open_it(link)
    res = _dltop("status", "--db", str(link))
    assert res.returncode == 2 and "a symbolic link" in res.stderr and \
        res.stderr.count("\n") == 1, res.stderr
    # a symlinked parent directory is fine: only the last component must be the file
    (tmp_path / "dirlink").symlink_to(tmp_path)
    assert _dltop("status", "--db", str(tmp_path / "dirlink" / "real.db")).returncode == 0


@pytest.mark.slow
def test_a_directory_as_db_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "d.db"
    folder.mkdir()
    for args in (("status",), ("vacuum",), ("export",),
                 ("run", str(_profile(tmp_path)), "--headless", "--no-telemetry")):
        res = _dltop(*args, "--db", str(folder))
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr == f"dltop: error: {folder} is a directory, not a database file\n" \
            or res.stderr.endswith(
                f"dltop: error: {folder} is a directory, not a database file\n"), (args, res)
    assert list(folder.iterdir()) == [] and not (tmp_path / "d-runs").exists()


def test_a_database_file_replaced_by_a_link_while_opening_is_refused(tmp_path: Path) -> None:
    from dltop.errors import UserError
    from dltop.store.db import database_file, same_file

    db = tmp_path / "d.db"
    db.write_bytes(b"")
    ident = database_file(db)
    assert ident is not None
    db.unlink()
    db.symlink_to(tmp_path / "victim")
    with pytest.raises(UserError, match="a symbolic link"):
        same_file(db, ident)
