"""Host-wide device leases: two dltop engines never run on the same GPU or CPU at once.

The allocator keeps one engine's runs apart; this keeps engines apart, whatever
database each writes and whichever user runs it. Every device has a lock file
in one directory shared by the host's users (:func:`lock_dir`: ``/tmp/dltop-locks``,
sticky and world-writable like ``/tmp``, or ``$DLTOP_LOCK_DIR``): ``gpu-0.lock``,
``cpu-3.lock``... A run holds an exclusive ``flock`` on each of its devices from
just before its cooldown until it ends. ``flock`` locks belong to the open file,
so they vanish when the last process holding it dies: a killed engine leaves
no stale lock, and the runner child inherits its run's lock descriptors, so an
orphaned runner keeps its devices leased until ``--resume`` reaps it.

Locks are taken one by one in a fixed global order (CPUs, then GPUs, by index)
and kept while the rest are awaited. Because every engine takes them in the
same order, two engines can never deadlock, and an engine waiting for the
whole host is not starved by a packing engine that keeps starting short runs
on whatever is free.

A packed run (``--pack``) of ``cpu:N`` or ``gpu:N`` wants *any* N cores or GPUs,
not the ones its engine's allocator first named: its lease takes the first N free
of the whole set (cores in :func:`~dltop.jobs.environment.core_order`), all at once
or none (so two such waiters can never each hold part of what the other needs), and
the run is pinned to what it got (:meth:`DeviceLease.bound`). Three packed engines
on two cores then keep both busy; waiting for a named core left one idle while the
others queued for its twin.

Waiting runs form a line (:mod:`dltop.jobs.tickets`): a run tries its locks only
when no run that started waiting before it wants one of its devices, so engines
get contended devices in arrival order, and the first in line takes whichever
device frees first.

When the directory cannot be used (read-only ``/tmp``, a lock file another user
made unreadable), the run goes on without a lease and records why
(``runs.device_lease``); the engine's scan for foreign runners
(:mod:`dltop.jobs.foreign`) still flags a run that shared its devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import getpass
import json
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dltop.jobs import tickets
from dltop.jobs.allocator import Allocation, DeviceAllocator

LOCK_DIR_ENV = "DLTOP_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/dltop-locks")
LEASE_HELD = "held"
"""``runs.device_lease`` of a run that held every device it ran on."""


def lock_dir() -> Path:
    """Where the host's device lock files live (``$DLTOP_LOCK_DIR`` or ``/tmp/dltop-locks``)."""
    return Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


def device_names(gpu_indices: Iterable[int], cpus: Iterable[int]) -> tuple[str, ...]:
    """Lock names of these devices, in the global order every engine takes them in."""
    return (*(f"cpu-{c}" for c in sorted(set(cpus))),
            *(f"gpu-{g}" for g in sorted(set(gpu_indices))))


def run_devices(alloc: Allocation, allocator: DeviceAllocator) -> tuple[str, ...]:
    """The lock names a run on ``alloc`` takes: its own devices when the engine packs.

    An engine that does not pack promises lone runs, so each of its runs leases
    the whole host and no other engine's run goes beside it.
    """
    if not allocator.pack:
        return device_names(range(allocator.gpu_count), allocator.cores)
    if alloc.cpu_affinity is None and not alloc.gpu_indices:
        return device_names((), allocator.cores)  # an unpinned CPU run: every core
    return device_names(alloc.gpu_indices, alloc.cpu_affinity or ())


def run_lease(names: tuple[str, ...], alloc: Allocation, allocator: DeviceAllocator,
              holder: dict[str, Any], directory: Path | None = None) -> DeviceLease:
    """The lease of a run whose executor takes ``names`` (:func:`run_devices` here, none
    for a Slurm job): a packed pinned-CPU or GPU run takes any free devices of its
    kind, every other run exactly ``names``."""
    if not names or not allocator.pack or alloc.exclusive:
        return DeviceLease(names, holder, directory)
    if alloc.gpu_indices:
        pool = tuple(f"gpu-{g}" for g in range(allocator.gpu_count))
        return DeviceLease(pool, holder, directory, any_of=len(alloc.gpu_indices))
    if alloc.cpu_affinity:
        pool = tuple(f"cpu-{c}" for c in allocator.cores)  # one per physical core first
        return DeviceLease(pool, holder, directory, any_of=len(alloc.cpu_affinity))
    return DeviceLease(names, holder, directory)


def read_holder(directory: Path, name: str) -> str:
    """Who holds a device's lock, as its holder recorded it (or ``another process``)."""
    try:
        info: dict[str, Any] = json.loads((directory / f"{name}.lock").read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    return describe_holder(info) if info else "another process"


def describe_holder(info: Mapping[str, Any]) -> str:
    """``campaign 3 `a` (pid 12, user u, db x.db)`` from what a holder or waiter recorded."""
    camp = f"campaign {info.get('campaign')} `{info.get('name')}`" if info.get("campaign") \
        else "a dltop engine"
    return (f"{camp} (pid {info.get('pid')}, user {info.get('user')}, "
            f"db {info.get('db')})")


class DeviceLease:
    """The locks of one run's devices, taken in order, held until :meth:`release`.

    Args:
        names: device lock names (see :func:`device_names`).
        holder: what to record in each lock file while held (campaign, db...).
        directory: the lock directory (default :func:`lock_dir`).
        any_of: take any this many of ``names`` (tried in the order given), all in
            one poll or none; None: every one of ``names``, in the global order.
    """

    def __init__(self, names: Iterable[str], holder: dict[str, Any],
                 directory: Path | None = None, *, any_of: int | None = None) -> None:
        given = tuple(dict.fromkeys(names))
        self.names = tuple(sorted(given, key=_sort_key))
        self.any_of = any_of
        self._order = given if any_of is not None else self.names
        self._need = len(self.names) if any_of is None else min(any_of, len(self.names))
        self.directory = directory or lock_dir()
        info = {**holder, "user": _user(), "host": socket.gethostname()}
        self._holder = json.dumps({**info, "pid": os.getpid()})
        self._info = info
        self._fds: dict[str, int] = {}
        self.unavailable: str | None = None
        """Why no lease could be taken (the run then goes on without one), else None."""
        self._ticket: tickets.Ticket | None = None
        self.no_line: str | None = None
        """Why this lease waits without a place in line (tickets unusable), else None."""
        self.ahead: tuple[tickets.Ticket, ...] = ()
        """Earlier live waiters for an overlapping device set, at the last :meth:`poll`."""

    @property
    def fds(self) -> tuple[int, ...]:
        """Descriptors of the locks held (a runner child inherits them)."""
        return tuple(self._fds.values())

    @property
    def complete(self) -> bool:
        """True when every device is locked, or when leasing is unavailable."""
        return self.unavailable is not None or len(self._fds) == self._need

    @property
    def held(self) -> tuple[str, ...]:
        """The device lock names held, in the global order."""
        return tuple(sorted(self._fds, key=_sort_key))

    def bound(self, alloc: Allocation) -> Allocation:
        """``alloc`` on the devices this lease got: an ``any_of`` lease may have taken
        others than the allocator named. Unchanged for any other lease, or one that
        could not be taken (:attr:`unavailable`: the run keeps its allocator's devices)."""
        if self.any_of is None or self.unavailable is not None or not self.complete:
            return alloc
        index = {n: int(n.partition("-")[2]) for n in self._fds}
        if alloc.gpu_indices:
            return replace(alloc, gpu_indices=tuple(sorted(index[n] for n in self._fds)))
        # pinned in the pool's order, as the allocator lists its cores
        return replace(alloc, cpu_affinity=tuple(index[n] for n in self._order
                                                 if n in self._fds))

    def poll(self) -> str | None:
        """Take the next free locks in order, without blocking, once no earlier waiter
        wants any of them (:mod:`dltop.jobs.tickets`: the first poll joins the line).

        Returns:
            None when the lease is complete (or unavailable: see
            :attr:`unavailable`), else the name of the device that is busy, or
            that the waiter next ahead in line wants too (see :attr:`ahead`).
        """
        if self.complete:
            return None
        try:
            tickets.ensure_dir(self.directory)
        except OSError as exc:
            self._give_up(f"lock directory {self.directory}: {exc}")
            return None
        # Once a lock is held no earlier ticket can appear (numbers only grow):
        # deferring then would only hold devices idle.
        if not self._fds and (ahead := self._line()):
            return next(d for d in self.names if d in ahead[0].devices)
        self.ahead = ()
        if self.any_of is not None:
            return self._poll_any()
        for name in self.names:
            if name in self._fds:
                continue
            try:
                held = self._try(name)
            except _Unusable as exc:
                self._give_up(str(exc))
                return None
            if held is None:
                return name
            self._fds[name] = held[0]
            if held[1]:
                self._record(held[0])
        self._leave_line()
        return None

    def _poll_any(self) -> str | None:
        """Lock the first free ``any_of`` devices, or none: what :meth:`poll` returns."""
        got: dict[str, tuple[int, bool]] = {}
        busy: str | None = None
        for name in self._order:
            if len(got) == self._need:
                break
            try:
                held = self._try(name)
            except _Unusable as exc:
                _close(got)
                self._give_up(str(exc))
                return None
            if held is None:
                busy = busy or name
                continue
            got[name] = held
        if len(got) < self._need:
            _close(got)  # all or none: no waiter holds a part of what another needs
            return busy or self._order[0]
        for name, (fd, writable) in got.items():
            self._fds[name] = fd
            if writable:
                self._record(fd)
        self._leave_line()
        return None

    def _try(self, name: str) -> tuple[int, bool] | None:
        """Open and lock ``name``'s lock file without waiting: (fd, writable), or None
        when another holds it.

        Raises:
            _Unusable: the lock file cannot be opened or locked (e.g. a file system
                without flock), naming it.
        """
        path = self.directory / f"{name}.lock"
        try:
            fd, writable = tickets.open_shared(path)
        except OSError as exc:
            raise _Unusable(f"{path}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            raise _Unusable(f"flock {path}: {exc}") from None
        return fd, writable

    def _record(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, self._holder.encode(), 0)

    def holder_of(self, name: str) -> str:
        """Who holds ``name`` now (for a "waiting for devices" message)."""
        return read_holder(self.directory, name)

    def waiting_text(self, busy: str) -> str:
        """What this lease waits for, after :meth:`poll` returned ``busy``.

        ``cpu 0-1: 2nd in line behind campaign 3 `b` (pid 1234, user u, db b.db)``
        while earlier waiters want these devices, else ``cpu 0-1: 1st in line;
        cpu-0 held by campaign 1 `a` (...)`` (without the place when there is no line).
        """
        held = f"{busy} held by {self.holder_of(busy)}"
        if self._ticket is None:
            return held
        want = self._wanted()
        if self.ahead:
            last = self.ahead[-1]
            return (f"{want}: {tickets.ordinal(len(self.ahead) + 1)} in line behind "
                    f"{describe_holder({**last.holder, 'pid': last.pid})}")
        return f"{want}: 1st in line; {held}"

    def waiting_facts(self) -> tuple[str, int]:
        """(the devices wanted, ``gpu 0-1`` or ``any 2 of cpu 0-7``; how many other
        processes it waits on: the live waiters ahead of it in line for them, else 1,
        the holder of the device :meth:`poll` found busy). No pid, user, campaign or
        database: these may leave the host (the exporter), :meth:`waiting_text` not."""
        return self._wanted(), len({t.pid for t in self.ahead}) or 1

    def _wanted(self) -> str:
        """The devices it wants: ``gpu 0-1``, or ``any 2 of cpu 0-7``."""
        want = tickets.describe_devices(self.names)
        return want if self.any_of is None else f"any {self._need} of {want}"

    def release(self) -> None:
        """Unlock every device held and leave the line (idempotent)."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor drops the flock
        self._fds.clear()
        self._leave_line()

    def _line(self) -> tuple[tickets.Ticket, ...]:
        """Join the line on the first call; the live earlier waiters this one defers to."""
        if self._ticket is None and self.no_line is None:
            try:
                self._ticket = tickets.take(self.directory, self.names, self._info)
            except OSError as exc:
                self.no_line = f"{self.directory / tickets.TICKETS_DIR}: {exc}"
        if self._ticket is not None:
            self.ahead = tuple(tickets.ahead_of(self.directory, self._ticket))
        return self.ahead

    def _leave_line(self) -> None:
        if self._ticket is not None:
            tickets.drop(self.directory, self._ticket)
            self._ticket = None

    def _give_up(self, why: str) -> None:
        self.release()
        self.unavailable = why


class _Unusable(Exception):
    """A lock file that cannot be opened or locked (its message names it)."""


def _close(got: Mapping[str, tuple[int, bool]]) -> None:
    for fd, _ in got.values():
        with contextlib.suppress(OSError):
            os.close(fd)


def _sort_key(name: str) -> tuple[str, int]:
    # "cpu" < "gpu": the order of device_names.
    kind, _, index = name.partition("-")
    return (kind, int(index) if index.isdigit() else -1)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


LEASE_POLL_S = 0.25
"""How often an engine waiting for devices tries their locks again."""


async def wait_for(lease: DeviceLease, stop: asyncio.Event,
                   on_busy: Callable[[str], Awaitable[None]],
                   poll_s: float = LEASE_POLL_S) -> bool:
    """Take every lock of ``lease``, waiting while another process holds one.

    Args:
        stop: set to give up (the locks taken so far are released).
        on_busy: awaited with :meth:`DeviceLease.waiting_text` when a busy device
            is met, and again each time that text changes (the holder, or the
            place in line).

    Returns:
        True when the lease is complete (or unavailable), False when stopped.
    """
    told = ""
    while (busy := lease.poll()) is not None:
        if (what := lease.waiting_text(busy)) != told:
            told = what
            await on_busy(what)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=poll_s)
        if stop.is_set():
            lease.release()
            return False
    return True
