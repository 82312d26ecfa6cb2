"""Every process a run starts is gone at its end (issue 38): a double-forked ``setsid``
daemon that execs with a clean environment (``tests/programs/cmd_daemon.py``) leaves
the run's group, session and token behind. The run's cgroup ends it where this host
has a writable cgroup v2 (this suite's machine has), the tracked-descendant sweep
where it has not (``$DLTOP_NO_CGROUP`` forces that); the run says which it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.jobs.containment import CGROUP, NO_CGROUP_ENV, SWEEP, RunScope, cgroup_base

from .conftest import RunJob, program

pytestmark = pytest.mark.slow


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def daemon_pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where cmd_daemon.py writes its daemon's pid; the daemon is killed afterwards
    whatever the test found (only if it still is that ``sleep``)."""
    path = tmp_path / "daemon.pid"
    yield path
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        proc = psutil.Process(int(path.read_text()))
        if proc.cmdline()[:1] == ["sleep"]:
            os.kill(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("force_sweep", [False, True], ids=["host", "sweep"])
def test_a_double_forked_clean_env_daemon_is_gone_after_the_run(
        command_job: RunJob, daemon_pidfile: Path, wait_until: Callable[..., None],
        monkeypatch: pytest.MonkeyPatch, force_sweep: bool) -> None:
    if force_sweep:
        monkeypatch.setenv(NO_CGROUP_ENV, "1")
    expected = SWEEP if force_sweep or cgroup_base() is None else CGROUP
    # 4 steps 0.25 s apart: the sweep lists the runner's adopted daemon in between
    r = command_job(program("cmd_daemon.py", daemon_pidfile, 4), iterations=3, warmup=1)
    assert r.run["status"] == "ok", (r.run, r.stderr)
    pid = int(daemon_pidfile.read_text())
    wait_until(lambda: gone(pid), 10, "the daemon to be gone")
    extra = json.loads(r.environment["extra"])
    assert extra["process_cleanup"] == expected and extra["leftover_processes"] >= 1, extra


@pytest.mark.parametrize("force_sweep", [False, True], ids=["host", "sweep"])
def test_a_scope_ends_what_its_process_left(monkeypatch: pytest.MonkeyPatch,
                                            force_sweep: bool) -> None:
    # A shell that leaves a setsid sleep with a clean environment behind and exits.
    if force_sweep:
        monkeypatch.setenv(NO_CGROUP_ENV, "1")
    scope = RunScope(secrets.token_hex(8))
    folder = scope.cgroup
    assert (folder is None) == (force_sweep or cgroup_base() is None)
    proc = subprocess.Popen(["/bin/sh", "-c", "setsid env -i sleep 300 & echo $!; sleep 0.2"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=scope.preexec)
    scope.started(proc.pid)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    try:
        scope.track()
        proc.wait()
        assert not gone(pid)
        assert scope.end() >= 1 and gone(pid)
        assert folder is None or not folder.exists()
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_resume_reaps_the_daemon_of_a_dead_engines_run(
        tmp_path: Path, profile_text: Any, daemon_pidfile: Path,
        wait_until: Callable[..., None]) -> None:
    # The engine is SIGKILLed; its runner dies of the broken event pipe, the daemon
    # lives on: the resumed engine ends the dead engine's run cgroup. (The sweep cannot:
    # nothing links the daemon to the run any more; see docs/own-programs.md.)
    assert cgroup_base() is not None, "this suite's machine has a writable cgroup v2"
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({
        "frameworks": ["command"], "models": ["m"], "batch_sizes": [8], "devices": ["cpu:1"],
        "warmup": 0, "iterations": 500, "timeout_s": 60,
        "command": program("cmd_daemon.py", daemon_pidfile, 1000, tmp_path / "quick")}))
    run = [sys.executable, "-m", "dltop", "run", "--headless", "--no-telemetry", "--db",
           str(tmp_path / "d.db")]
    engine = subprocess.Popen([*run, str(prof)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    first = 0
    try:
        wait_until(daemon_pidfile.exists, 60, "the daemon to start")
        engine.kill()
        engine.wait()
        first = int(daemon_pidfile.read_text())
        assert not gone(first)
        (tmp_path / "quick").touch()  # the resumed run: 2 steps, short
        res = subprocess.run([*run, "--resume"], capture_output=True, text=True, timeout=120)
        # exit 4: the resumed run is short (a result the user must look at)
        assert res.returncode == 4 and "orphaned process" in res.stderr, res.stderr
        wait_until(lambda: gone(first), 10, "the first run's daemon to be gone")
    finally:
        with contextlib.suppress(OSError):
            if first and not gone(first):
                os.kill(first, signal.SIGKILL)
