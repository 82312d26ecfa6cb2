"""``dltop log RUN``: a real ``dltop`` process printing a run's runner.log."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dltop.catalog import RunStatus
from dltop.store import Store, connect

from .detail_data import DetailSeed, seed_detail


@pytest.fixture
def data(tmp_path: Path) -> DetailSeed:
    return seed_detail(tmp_path)


def dltop(*args: str, stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], stdout=stdout,
                          stderr=subprocess.PIPE, timeout=120, check=False)


def test_prints_the_whole_log_as_written(data: DetailSeed) -> None:
    data.log.write_bytes(b"first\r\nprogress 10%\rprogress 100%\n\x1b[2Jlast\n")
    out = dltop("log", str(data.ok_run), "--db", str(data.seeded.db_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout == data.log.read_bytes()  # piped: the exact bytes


def test_tail_prints_the_last_lines(data: DetailSeed) -> None:
    out = dltop("log", str(data.ok_run), "--db", str(data.seeded.db_path), "--tail", "3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == ["step 23: loss 0.850", "step 24: loss 0.800",
                                                "done"]


def test_a_terminal_gets_control_characters_escaped(data: DetailSeed) -> None:
    data.log.write_bytes(b"ok line\n\x1b[2Jcleared\n")
    primary, secondary = pty.openpty()
    try:
        out = dltop("log", str(data.ok_run), "--db", str(data.seeded.db_path),
                    stdout=secondary)
        os.close(secondary)
        secondary = -1
        text = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:
                break
            if not chunk:
                break
            text += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert out.returncode == 0, out.stderr
    assert b"\\x1b[2Jcleared" in text and b"\x1b" not in text


def test_unknown_run_and_missing_logs_exit_2(data: DetailSeed) -> None:
    db = str(data.seeded.db_path)
    out = dltop("log", "999", "--db", db)
    assert out.returncode == 2 and b"run 999 not found" in out.stderr
    out = dltop("log", str(data.crashed_run), "--db", db)
    assert out.returncode == 2
    assert b"runner.log is missing (pruned or deleted)" in out.stderr
    assert b"Traceback" not in out.stderr
    store = Store(connect(data.seeded.db_path))
    job = data.seeded.job_ids[3]
    never = store.start_run(job, data.seeded.campaign_id, 1, "", 64)
    out = dltop("log", str(never), "--db", db)
    assert out.returncode == 2 and b"has no log" in out.stderr


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_follow_prints_until_the_run_ends(data: DetailSeed, tmp_path: Path,
                                          wait_until: Callable[..., None]) -> None:
    store = Store(connect(data.seeded.db_path))
    log = Path(next(store.db.query("select log_path from runs where id = ?",
                                   [data.running_run]))["log_path"])
    printed = tmp_path / "followed.txt"
    with printed.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "dltop", "log", str(data.running_run),
                                 "--db", str(data.seeded.db_path), "--follow"],
                                stdout=sink, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: printed.read_text().endswith("log line 49\n"), 60,
                   "the log so far")
        with log.open("a") as fh:  # the runner writes on
            fh.write("written while following\n")
        wait_until(lambda: "written while following" in printed.read_text(), 60,
                   "the new line")
        assert proc.poll() is None  # still following: the run goes on
        store.finish_run(data.running_run, data.seeded.job_ids[2], RunStatus.CRASHED, {})
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    text = printed.read_text()
    assert text.startswith("log line 0\n") and text.endswith("written while following\n")


def test_the_command_loads_nothing_heavy() -> None:
    probe = ("import sys, dltop.cli.logs, dltop.live.logfile\n"
             "print(' '.join(m for m in ('textual', 'rich', 'sqlite_utils', 'numpy', "
             "'asyncio') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == []
