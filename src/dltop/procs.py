"""Process facts any layer may ask for: a process's start time, an engine's liveness, a log's end.

Standard library and psutil only, so a viewer can use them without importing
the engine or the supervisor (which starts and kills children).
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

LOG_TAIL_BYTES = 4000
"""How much of a log's end :func:`read_log_tail` reads by default."""


def process_start_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), or None if it is gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def process_alive(pid: int, start_time: float | None) -> bool:
    """True if process ``pid`` runs and (when given) started at ``start_time``.

    The start time tells a reused pid from the process that was recorded; a zombie
    (killed, its parent has not reaped it yet) counts as dead.
    """
    now = process_start_time(pid)
    if now is None or (start_time is not None and abs(now - start_time) >= 0.05):
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def engine_alive(pid: int | None, start_time: float | None) -> bool:
    """True if the recorded engine process still runs (same pid and start time)."""
    if not pid or pid == os.getpid():
        return False
    return process_alive(pid, start_time)


def read_log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log, decoded leniently, starting at a line break."""
    try:  # O_NOFOLLOW: a log replaced by a link to another file is not read (or stored)
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > limit and "\n" in text:
        text = text.split("\n", 1)[1]
    return text
