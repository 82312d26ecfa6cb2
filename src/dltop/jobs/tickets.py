"""The line of runs waiting for host devices: the lease is handed out in arrival order.

Without an order, every waiting engine retries its locks a few times a second and
whichever polls first after a release wins: a campaign could wait for minutes while
campaigns started after it took the cores. So a run that wants devices first takes a
*ticket* in the lock directory's ``tickets/`` folder: one file per waiter, named by
a number drawn under an ``flock`` on ``tickets/counter`` (each number above every
ticket on disk, so a lower number always means an earlier arrival), holding its
pid, process start time, campaign and wanted devices. A run tries its locks only
when no earlier live ticket wants a device it wants; it drops its ticket once it
holds them all, or when it stops waiting.

A waiter that dies (SIGKILL, a crash) cannot drop its ticket: the next waiter that
meets a ticket whose pid is gone, or whose process started at another time (the
pid was reused), removes it. A dead ticket another user left behind, which the
sticky directory does not let us remove, is ignored the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop.procs import process_alive, process_start_time

TICKETS_DIR = "tickets"
COUNTER = "counter"
_TICKET_NAME = re.compile(r"^(\d{1,18})\.json$")


@dataclass(frozen=True)
class Ticket:
    """One run's place in the line for host devices."""

    number: int
    """Arrival order: lower numbers came first."""
    pid: int
    start_time_s: float | None
    """The waiting process's start time (seconds since the epoch), to tell a reused pid."""
    devices: tuple[str, ...]
    """Lock names wanted (``cpu-0``, ``gpu-1``...)."""
    holder: dict[str, Any]
    """What the waiter recorded about itself (campaign, name, db, user)."""


def ensure_dir(path: Path) -> None:
    """Create a directory shared by every user (mode 1777, as ``/tmp``) unless it exists."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        pass
    else:
        # mkdir's mode is cut by the umask; chmod is not. Sticky: no user can
        # remove or replace another user's file.
        with contextlib.suppress(OSError):
            os.chmod(path, 0o1777)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")


def take(lock_dir: Path, devices: Iterable[str], holder: dict[str, Any]) -> Ticket:
    """Join the line for ``devices``: write this process's ticket and return it.

    Raises:
        OSError: the tickets folder or its counter cannot be used (the caller then
            waits without a place in line, as before tickets existed).
    """
    folder = lock_dir / TICKETS_DIR
    ensure_dir(folder)
    pid = os.getpid()
    body = {**holder, "pid": pid, "start_time_s": process_start_time(pid),
            "devices": list(devices)}
    fd, _ = open_shared(folder / COUNTER)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for microseconds: a blocking wait is fine
        number = 1 + max(_read_counter(fd), *(n for n, _ in _listed(folder)), 0)
        tmp = folder / f".{number}.{pid}.tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                               | os.O_CLOEXEC, 0o644), "w") as fh:
            json.dump({**body, "number": number}, fh)
        # Renamed while the counter is locked: a ticket is whole when seen, and
        # every lower number is already on disk when a higher one appears.
        os.rename(tmp, folder / f"{number}.json")
        with contextlib.suppress(OSError):  # read-only (another user's): the max above
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(number).encode(), 0)
    finally:
        os.close(fd)  # drops the flock
    return _ticket(number, body)


def ahead_of(lock_dir: Path, mine: Ticket) -> list[Ticket]:
    """Live tickets before ``mine`` that want one of its devices, earliest first.

    Dead waiters' tickets met on the way are removed (or skipped when they are
    another user's).
    """
    folder = lock_dir / TICKETS_DIR
    wanted = set(mine.devices)
    out = []
    for number, path in sorted(_listed(folder)):
        if number >= mine.number:
            break
        ticket = _read(path, number)
        if ticket is None:
            continue
        if not process_alive(ticket.pid, ticket.start_time_s):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        if wanted.intersection(ticket.devices):
            out.append(ticket)
    return out


def drop(lock_dir: Path, ticket: Ticket) -> None:
    """Leave the line (idempotent)."""
    with contextlib.suppress(OSError):
        (lock_dir / TICKETS_DIR / f"{ticket.number}.json").unlink()


def describe_devices(names: Iterable[str]) -> str:
    """``cpu-0, cpu-1, cpu-2, gpu-1`` as ``cpu 0-2, gpu 1``."""
    by_kind: dict[str, list[int]] = {}
    for name in names:
        kind, _, index = name.partition("-")
        if index.isdigit():
            by_kind.setdefault(kind, []).append(int(index))
    parts = []
    for kind, indices in by_kind.items():
        runs: list[list[int]] = []
        for i in sorted(set(indices)):
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        parts.append(f"{kind} " + ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs))
    return ", ".join(parts) or "no devices"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th ... 11th, 12th, 13th ... 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def open_shared(path: Path) -> tuple[int, bool]:
    """Open (creating) a file every user's engine shares (a device's lock, the ticket
    counter); return (fd, writable).

    ``O_NOFOLLOW``: in a world-writable directory a planted symlink must not make
    us write another file. A file another user created is opened read-only when
    it is not writable for us (``flock`` needs no write access).
    """
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_RDWR, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), False
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != 0o666:
            # any user's engine may record itself as a holder, or draw a number
            os.fchmod(fd, 0o666)
    return fd, True


def _read_counter(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0)
    except (OSError, ValueError):
        return 0


def _listed(folder: Path) -> list[tuple[int, Path]]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(int(m.group(1)), folder / n) for n in names if (m := _TICKET_NAME.match(n))]


def _read(path: Path, number: int) -> Ticket | None:
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)) as fh:
            body = json.load(fh)
        return _ticket(number, body)
    except (OSError, ValueError, TypeError, KeyError):
        return None  # gone meanwhile, or not a ticket: no place in line


def _ticket(number: int, body: dict[str, Any]) -> Ticket:
    start = body.get("start_time_s")
    keep = ("campaign", "name", "db", "user", "host")
    return Ticket(number, int(body["pid"]), None if start is None else float(start),
                  tuple(str(d) for d in body.get("devices", ())),
                  {k: body[k] for k in keep if k in body})
