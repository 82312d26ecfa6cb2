"""Start a background engine (``dltop run ... --headless``) that outlives its viewer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dltop.errors import SetupError
from dltop.jobs.rundir import UnsafeRunDir, ensure_private_dir
from dltop.procs import read_log_tail

STARTUP_CHECK_S = 2.0
"""An engine that exits this soon failed to start; its log says why."""


class EngineDidNotStart(SetupError):
    """A background engine exited at once (exit 1, not 2: the input was fine)."""


@dataclass(frozen=True)
class Launch:
    """A started engine, or one that exited at once."""

    pid: int
    log_path: Path
    exit_code: int | None
    """None while the engine runs (the normal case)."""
    log_tail: str


def start_engine(run_args: Sequence[str], db_path: Path, logs_dir: Path,
                 wait_s: float = STARTUP_CHECK_S) -> Launch:
    """Start ``dltop run <run_args> --headless --db DB`` in its own session.

    Args:
        run_args: arguments after ``dltop run`` (profiles, or ``--resume``...).
        db_path: the database the engine writes.
        logs_dir: where the engine's own log goes (runner logs go beside the DB).
        wait_s: how long to watch for an immediate failure.

    Returns:
        The engine's pid and log; ``exit_code`` is set if it already exited.
    """
    argv = [sys.executable, "-m", "dltop", "run", *run_args, "--headless", "--db",
            str(db_path)]
    log = logs_dir / f"engine-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns()}.log"
    proc = spawn_detached(argv, log)
    try:
        code: int | None = proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        code = None
    return Launch(proc.pid, log, code, read_log_tail(log) if code is not None else "")


def spawn_detached(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start a dltop engine that outlives this terminal: own session, output to a log.

    A closed SSH connection (SIGHUP) or Ctrl-C in the terminal never reaches it;
    ``dltop status``/``pause``/``cancel`` steer it through the database.
    """
    try:
        ensure_private_dir(log_path.parent)
    except UnsafeRunDir as exc:
        raise EngineDidNotStart(str(exc)) from None
    # user-only, and never through a planted link (the name is new: O_EXCL)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "ab") as log:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
