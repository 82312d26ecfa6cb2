"""Every process a run starts is gone at its end: a cgroup per run, or a sweep.

Used by the supervisor only (:mod:`dltop.jobs.supervisor` starts and kills children).
A process group or a session does not hold a run's processes: a program may leave
both (``setsid``), double-fork so it is nobody's child, and exec with a clean
environment (``env -i``) so no marker variable says whose it is. Two ways hold it:

- **cgroup** (cgroup v2, where this process's cgroup can have children: root, or a
  delegated subtree): each run gets ``dltop-run-<engine pid>-<its start>-<token>``
  under the engine's own cgroup (a resumed engine ends those of dead engines:
  :func:`end_dead_engines_cgroups`); the runner joins it between fork and exec, so
  everything it starts is born inside, whatever it does with sessions or
  environments. At the end ``cgroup.kill`` (Linux 5.14; else each listed process)
  ends them all, and the folder is removed.
- **session sweep** (no writable cgroup, or ``$DLTOP_NO_CGROUP`` set): the runner is
  made a child subreaper (``PR_SET_CHILD_SUBREAPER``), so an orphan anywhere below it
  becomes its child instead of init's; its descendants are listed every
  :data:`TRACK_S` while it runs, and at the end those still alive (same pid and start
  time), every process of its session, and any carrying the run's token get TERM,
  then KILL. What escapes it: a daemon whose parents exit within one listing and that
  is adopted after the runner exited, and, when the engine is killed, a daemon whose
  runner died too (the runner adopted it, and nobody listed it since); not the cgroup.

Which one ran is the run's ``process_cleanup`` fact (shown in its environment).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

CGROUP = "cgroup"
SWEEP = "session sweep"
NO_CGROUP_ENV = "DLTOP_NO_CGROUP"
"""Set (to anything but empty) to use the session sweep where a cgroup would do."""
TRACK_S = 0.5
"""How often a sweep-mode run's descendants are listed."""
TERM_GRACE_S = 1.0
"""Between a leftover process's TERM and its KILL."""
PR_SET_CHILD_SUBREAPER = 36
RUN_TOKEN = "DLTOP_RUN_TOKEN"
"""Environment variable marking every process a run starts (that keeps it)."""


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if fields[fields.index("-") + 1] == "cgroup2":
                    return Path(fields[4])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _own_cgroup(proc_file: str) -> str | None:
    """The cgroup v2 path (``0::/...``) in a ``/proc/PID/cgroup`` file."""
    try:
        with open(proc_file, encoding="utf-8") as f:
            return next((ln.strip()[3:] for ln in f if ln.startswith("0::")), None)
    except OSError:
        return None


def cgroup_base() -> Path | None:
    """This process's cgroup v2 folder when a child cgroup can be made in it, else None."""
    if os.environ.get(NO_CGROUP_ENV):
        return None
    rel, mount = _own_cgroup("/proc/self/cgroup"), _cgroup2_mount()
    if rel is None or mount is None:
        return None
    base = mount / rel.lstrip("/")
    if not (base / "cgroup.procs").is_file() or not os.access(base, os.W_OK):
        return None
    return base


class RunScope:
    """One run's processes, held in a cgroup or tracked for the sweep.

    Args:
        token: the run's token (its cgroup's name, and ``$DLTOP_RUN_TOKEN``).
    """

    def __init__(self, token: str) -> None:
        self.token = token
        self.cgroup: Path | None = None
        self.method = SWEEP
        self.pid: int | None = None
        self._seen: dict[int, float] = {}  # descendants: pid -> start time
        self._since = time.time() - 1.0  # start times are rounded to clock ticks
        base = cgroup_base()
        if base is not None:
            for stale in _dead_engines_cgroups(base):  # empty ones only: no process killed
                with contextlib.suppress(OSError):
                    stale.rmdir()
            path = base / f"dltop-run-{_engine_tag(os.getpid())}-{token}"
            with contextlib.suppress(OSError):
                path.mkdir(mode=0o755)
                self.cgroup = path
        self._procs_file = None if self.cgroup is None else str(self.cgroup / "cgroup.procs")
        self._prctl: Callable[..., int] | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec(self) -> None:
        """In the runner between fork and exec: join the run's cgroup, else become a
        subreaper. Only system calls: other threads of the engine may hold locks."""
        if self._procs_file is not None:
            try:
                fd = os.open(self._procs_file, os.O_WRONLY)
                try:
                    os.write(fd, b"0")  # "0": the writing process
                    return
                finally:
                    os.close(fd)
            except OSError:
                pass  # started() sees it: the sweep holds the run instead
        if self._prctl is not None:
            self._prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def started(self, pid: int) -> None:
        """The runner ``pid`` exists: check it is in the cgroup (else sweep instead)."""
        self.pid = pid
        if self.cgroup is not None:
            if pid in self._cgroup_pids():
                self.method = CGROUP
            else:
                self._remove_cgroup()

    def track(self) -> None:
        """Note the runner's descendants now (sweep mode; nothing with a cgroup)."""
        if self.method == CGROUP or self.pid is None:
            return
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self._seen.setdefault(p.pid, p.create_time())

    def end(self) -> int:
        """Kill every process of the run that is left; how many there were."""
        if self.method == CGROUP and self.cgroup is not None:
            return self._kill_cgroup()
        return self._sweep()

    def _cgroup_pids(self) -> list[int]:
        assert self.cgroup is not None
        try:
            return [int(x) for x in (self.cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def _kill_cgroup(self) -> int:
        assert self.cgroup is not None
        n = _end_cgroup(self.cgroup)
        self.cgroup, self._procs_file = None, None
        return n

    def _remove_cgroup(self) -> None:
        if self.cgroup is not None:
            _rmdir(self.cgroup)
        self.cgroup, self._procs_file = None, None

    def _sweep(self) -> int:
        """TERM, then KILL, what is left: tracked descendants (same start time), the
        runner's session, and the processes carrying the run's token."""
        me, here = os.getuid(), os.getpid()
        left: list[psutil.Process] = []
        for proc in psutil.process_iter(["uids", "create_time", "status"]):
            try:
                info = proc.info
                if (proc.pid == here or info["uids"] is None or info["uids"].real != me
                        or info["create_time"] < self._since
                        or info["status"] == psutil.STATUS_ZOMBIE):
                    continue
                ours = (self._seen.get(proc.pid) == info["create_time"]
                        or (self.pid is not None and os.getsid(proc.pid) == self.pid)
                        or proc.environ().get(RUN_TOKEN) == self.token)
                if ours:
                    left.append(proc)
            except (psutil.Error, OSError):
                continue
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        # Polled, not psutil.wait_procs: an orphan's zombie (an init that does not reap,
        # in a container) would hold that for the whole grace.
        deadline = time.monotonic() + TERM_GRACE_S
        alive = left
        while alive and time.monotonic() < deadline:
            time.sleep(0.02)
            alive = [p for p in alive if _alive(p.pid)]
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        return len(left)


def _engine_tag(pid: int) -> str | None:
    """``<pid>-<start time, 1/100 s>`` of a live process (None: gone): which engine a run
    cgroup belongs to, in its name, so a later engine can tell a dead one's."""
    try:
        return f"{pid}-{int(psutil.Process(pid).create_time() * 100)}"
    except psutil.Error:
        return None


def end_dead_engines_cgroups() -> int:
    """End the run cgroups under this engine's cgroup whose engine is dead (killed,
    say, while its runner went on and left a daemon); how many processes they held."""
    base = cgroup_base()
    return 0 if base is None else sum(_end_cgroup(p) for p in _dead_engines_cgroups(base))


def _dead_engines_cgroups(base: Path) -> list[Path]:
    """The run cgroups under ``base`` whose engine (named in them) is gone."""
    dead = []
    for path in base.glob("dltop-run-*-*-*"):
        pid, start = path.name[len("dltop-run-"):].split("-")[:2]
        if pid.isdigit() and _engine_tag(int(pid)) != f"{pid}-{start}":
            dead.append(path)
    return dead


def kill_run_cgroups(pids: list[int]) -> int:
    """End the run cgroups (``dltop-run-*``) that the processes ``pids`` are in, whole,
    and remove them; how many processes they held. For a dead engine's runs: the
    resumed engine reaps their daemons too, not only their groups and sessions."""
    mount = _cgroup2_mount()
    found: set[Path] = set()
    for pid in pids:
        rel = _own_cgroup(f"/proc/{pid}/cgroup")
        if mount is not None and rel is not None and \
                Path(rel).name.startswith("dltop-run-"):
            found.add(mount / rel.lstrip("/"))
    return sum(_end_cgroup(path) for path in found if path.is_dir())


def _end_cgroup(path: Path) -> int:
    """Kill every process in the cgroup ``path`` and remove it; how many were alive."""
    def pids() -> list[int]:
        try:
            return [int(x) for x in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    left = [p for p in pids() if _alive(p)]
    deadline = time.monotonic() + 5.0
    while pids() and time.monotonic() < deadline:
        try:
            (path / "cgroup.kill").write_text("1")  # the whole cgroup at once, forks too
        except OSError:  # before Linux 5.14: one by one, until none is left
            for pid in pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    _rmdir(path)
    return len(left)


def _rmdir(path: Path) -> None:
    deadline = time.monotonic() + 2.0
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY while killed processes finish exiting
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
