"""Issue 27: stored paths are absolute, so ``dltop log`` works from any directory.

``dltop run --db sub/d.db`` from one directory stored ``runs.log_path`` relative to
it; ``dltop log`` from another directory then called the log "missing (pruned or
deleted)" while it was there. A real ``command`` job runs, then the log is read
from elsewhere; an older database (the path rewritten relative, as it was stored)
is read too.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.paths import stored_path

PROGRAM = "for i in range(3):\n    print('step %d took 0.001000s' % i, flush=True)\n"
PROFILE = """
name = "paths"
[defaults]
iterations = 2
warmup = 1
timeout_s = 60
[[matrix]]
frameworks = ["command"]
models = ["prog"]
batch_sizes = [1]
devices = ["cpu:1"]
command = [{python!r}, "prog.py"]
iteration_regex = "took (?P<seconds>[0-9.]+)s"
"""


def dltop(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DLTOP_DB"}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "dltop", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_log_path_is_absolute_and_dltop_log_works_from_another_directory(
        tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "sub").mkdir(parents=True)
    b.mkdir()
    (a / "prog.py").write_text(PROGRAM)
    (a / "p.toml").write_text(PROFILE.format(python=sys.executable))
    res = dltop(a, "--db", "sub/d.db", "run", "--headless", "p.toml")
    assert res.returncode == 0, res.stdout + res.stderr
    conn = sqlite3.connect(a / "sub" / "d.db")
    (stored,), = conn.execute("select log_path from runs where id = 1").fetchall()
    assert os.path.isabs(stored) and Path(stored).is_file(), stored
    # from another directory, with the database named relative to that one
    shown = dltop(b, "--db", "../a/sub/d.db", "log", "1")
    assert shown.returncode == 0, shown.stderr
    assert "step 2 took" in shown.stdout
    # a database written by an older dltop: the path stored relative to dir a
    conn.execute("update runs set log_path = 'sub/d-runs/run-1/runner.log' where id = 1")
    conn.commit()
    conn.close()
    # The log's last lines: the program's steps, and when the runner stopped the program
    # (a race with its own exit) a line saying so.
    whole = Path(stored).read_text()
    old = dltop(b, "--db", str(a / "sub" / "d.db"), "log", "1", "--tail", "4")
    assert old.returncode == 0, old.stderr
    assert "step 2 took 0.001000s" in old.stdout and whole.endswith(old.stdout)
    assert len(old.stdout.splitlines()) <= 4
    assert "missing" not in old.stdout + old.stderr


@pytest.mark.parametrize(("stored", "db", "expected"), [
    ("/x/y.log", "d.db", "/x/y.log"),
    ("sub/d-runs/run-3/runner.log", "/data/sub/d.db", "/data/sub/d-runs/run-3/runner.log"),
    ("d-runs/run-3/runner.log", "/data/sub/d.db", "/data/sub/d-runs/run-3/runner.log"),
    ("other.log", "/data/d.db", "/data/other.log"),
    ("", "/data/d.db", ""),
])
def test_stored_path_resolves_old_relative_paths_beside_the_database(
        stored: str, db: str, expected: str) -> None:
    assert stored_path(stored, db) == expected
