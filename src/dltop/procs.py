"""Process facts any layer may ask for: a process's start time, an engine's liveness, a log's end.

Standard library and psutil only, so a viewer can use them without importing
the engine or the supervisor (which starts and kills children).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil

LOG_TAIL_BYTES = 4000
"""How much of a log's end :func:`read_log_tail` reads by default."""
HOST_ENV = "DLTOP_HOST"
"""Overrides this host's name for engine liveness (a second "login node" in the tests,
or a site whose login nodes share one name)."""
HEARTBEAT_S = 5.0
"""How often an engine refreshes its heartbeat in the database."""
HEARTBEAT_STALE_S = 60.0
"""A heartbeat older than this is a dead engine's, when judged from another host. Many
beats long: a writer held up by a slow disk or a long transaction must not look dead
(a second engine would take its campaign over)."""


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


def this_host() -> str:
    """The name an engine records as its host: ``$DLTOP_HOST``, else the host name."""
    return os.environ.get(HOST_ENV, "").strip() or socket.gethostname()


def engine_alive(pid: int | None, start_time: float | None, host: str | None = None,
                 heartbeat_s: float | None = None) -> bool:
    """True if the campaign's recorded engine still runs.

    On the engine's own host (or when the database names no host: an engine older
    than migration 22) the process answers: same pid and start time. From another
    host a pid means nothing, so the heartbeat does: fresh (under
    :data:`HEARTBEAT_STALE_S`, on this host's clock) means alive. Hosts sharing a
    database must have synchronised clocks (Slurm's munge needs them too).

    Args:
        pid: the engine's pid as recorded.
        start_time: that process's start time as recorded.
        host: the engine's host as recorded (``campaigns.engine_host``).
        heartbeat_s: its last heartbeat, epoch seconds (``campaigns.engine_heartbeat_s``).
    """
    if not pid:
        return False
    if host is None or host == this_host():
        return pid != os.getpid() and process_alive(pid, start_time)
    return heartbeat_s is not None and time.time() - heartbeat_s < HEARTBEAT_STALE_S


def heartbeat_age(heartbeat_s: float | None) -> str:
    """How long ago the heartbeat was, for messages (``12 s ago``, ``never``)."""
    if heartbeat_s is None:
        return "never"
    age = max(0.0, time.time() - heartbeat_s)
    return f"{age:.0f} s ago" if age < 120 else f"{age / 60:.0f} min ago"


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


class SignalCatcher:
    """Remembers the first of some signals, for a main thread that polls it.

    Its handler takes no lock: a handler runs on the main thread between two bytecodes,
    possibly while that thread holds the lock inside ``threading.Event.wait``, so an
    ``Event.set()`` there can deadlock the process (a ``dltop agent`` once ignored its
    SIGTERM that way). The waiting thread polls :attr:`name` instead.
    """

    def __init__(self) -> None:
        self.name = ""
        """The first signal's name (``SIGTERM``), empty until one arrives."""

    def _handle(self, signum: int, _frame: object) -> None:
        self.name = self.name or signal.Signals(signum).name

    @contextmanager
    def installed(self, signals: Sequence[signal.Signals]) -> Iterator[SignalCatcher]:
        """Catch ``signals`` inside the block; their previous handlers come back after."""
        before = {sig: signal.signal(sig, self._handle) for sig in signals}
        try:
            yield self
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def wait(self, timeout_s: float | None = None, poll_s: float = 0.2) -> str:
        """Sleep until a signal came (its name) or ``timeout_s`` passed (empty string)."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.name:
            left = poll_s if end is None else min(poll_s, end - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)
        return self.name
