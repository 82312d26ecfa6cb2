"""Start one runner child, read its events, enforce its deadline, classify the end.

The only place dltop starts or kills runner children (:mod:`dltop.jobs.start`
starts the background engine). Each child runs in a new
session (so its own process group, and no controlling terminal: a closed SSH
connection or Ctrl-C in the terminal never reaches it directly); every stop
signals the whole group, TERM first, then KILL after a grace period, and the
run's whole tree is swept with KILL once the child has exited so no grandchild
outlives its run: every process of the child's session, and any that left it
(``setsid``) but still carries the run's token ``$DLTOP_RUN_TOKEN`` in its
environment.

The child is reaped here with ``os.wait4`` (in a thread of its own, as asyncio's
threaded child watcher does it), not by asyncio, so that its resource usage is
not lost: ``ru_maxrss`` is the peak resident set of the runner process itself
and of every descendant that was waited for (by it or by a waited-for
descendant; the kernel keeps the largest, it does not add them up), so a
``command`` job's program, which the runner waits for, is covered. A process
that left the tree unreaped (double-forked) is not, nor is the sum of
processes that ran at the same time. See :attr:`ChildOutcome.rss_peak_kernel_bytes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from dltop.catalog import RunStatus
from dltop.jobs.containment import (
    RUN_TOKEN,
    SWEEP,
    TRACK_S,
    RunScope,
    end_dead_engines_cgroups,
    kill_run_cgroups,
)
from dltop.jobs.eventreader import EventHandler, EventReader, classify_outcome
from dltop.procs import process_start_time, read_log_tail

TERM_GRACE_S = 5.0
WATCH_STEP_S = 1.0
"""The deadline is checked this often (see _wait_awake)."""
STALL_S = 2.0
"""A watch step this much late means the engine was stopped, not merely busy."""


@dataclass(frozen=True)
class ChildOutcome:
    """How a runner child ended."""

    status: RunStatus
    # The zeros: a run with no process of its own here (it never started, or ran elsewhere).
    exit_code: int | None = None
    pid: int = 0
    pgid: int = 0
    wall_s: float = 0.0
    message: str | None = None
    error_kind: str | None = None
    protocol_errors: int = 0
    protocol_note: str | None = None
    """The first protocol error: what was wrong with which event (None when none)."""
    profile_refused: str | None = None
    """Why the runner's operator profile was refused, so not stored (None: it was not)."""
    log_tail: str = ""
    hello: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    done: Mapping[str, Any] = field(default_factory=dict)
    """The runner's ``done`` event (empty when it sent none)."""
    rss_peak_kernel_bytes: int | None = None
    """The kernel's peak RSS of the runner and its waited-for descendants (``wait4``'s
    ``ru_maxrss``, the largest single process, not a sum); None when not reaped here, or
    when not above dltop's own peak (Linux counts the spawner's image at exec)."""
    job_env: Mapping[str, str] | None = None
    """A Slurm run's variables as its runner had them (``node.sh`` reports them); None
    where the runner's environment is the one dltop built (a local child)."""


def own_peak_rss_bytes() -> int:
    """This process's peak RSS so far (``VmHWM``; ``getrusage`` where /proc is absent)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak * (1 if sys.platform == "darwin" else 1024)


class _Child:
    """A started runner, reaped by ``os.wait4`` in a thread so its rusage is kept.

    Shaped like :class:`asyncio.subprocess.Process` where the supervisor uses it
    (``pid``, ``returncode``, ``await wait()``).
    """

    def __init__(self, popen: subprocess.Popen[bytes], spawner_peak_bytes: int) -> None:
        self.pid = popen.pid
        self.returncode: int | None = None
        self.maxrss_bytes: int | None = None
        self._spawner_peak_bytes = spawner_peak_bytes
        self._popen = popen
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = loop.create_future()
        # A thread per child, not the default executor: a run can last days, and a
        # packed campaign's runs would hold every executor thread meanwhile.
        threading.Thread(target=self._reap, args=(loop,), name=f"dltop-reap-{self.pid}",
                         daemon=True).start()

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        code = 255
        while True:
            try:
                _, status, usage = os.wait4(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:  # reaped elsewhere: no exit status, no rusage
                break
            code = os.waitstatus_to_exitcode(status)
            # Linux counts ru_maxrss in KiB, macOS in bytes.
            peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
            # At exec Linux folds the old memory image's high-water mark into the child's
            # ru_maxrss: with fork or vfork that image is this process's. A peak not above
            # our own cannot be told from it, so it is no figure (the samples still are).
            self.maxrss_bytes = peak if peak > self._spawner_peak_bytes else None
            break
        self._popen.returncode = code  # Popen must not wait for it again
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._set, code)

    def _set(self, code: int) -> None:
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    async def wait(self) -> int:
        """The exit code (negative: killed by that signal), once the child is reaped."""
        return await asyncio.shield(self._exited)


def kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def reap_orphan_group(pid: int | None, pgid: int | None, start_time: float | None) -> int:
    """Kill what is left of a runner group a dead engine started; return processes killed.

    The group is recognised only while it can be ours: either its leader still
    runs with the recorded start time, or the leader is gone and members remain
    (a process group id cannot be reused while any member lives). A leader pid
    that now belongs to a different process (start time differs) is left alone.
    The runner leads a session too (its id is the group's): members of that
    session in other groups (a command job's program) are killed with it, and so is
    the whole run cgroup any of them is in (:func:`~dltop.jobs.containment.kill_run_cgroups`).
    """
    if not pgid:
        return 0
    if pid and start_time is not None:
        now = process_start_time(pid)
        if now is not None and abs(now - start_time) > 0.05:
            return 0
    members, other_groups = [], set()
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            group = os.getpgid(proc.pid)
            if group == pgid or os.getsid(proc.pid) == pgid:
                members.append(proc.pid)
                other_groups.add(group)
        except (ProcessLookupError, PermissionError):
            continue
    # Descendants that left the session (a daemon the runner adopted as subreaper)
    # and the run's cgroup (whatever left the tree too), then the groups.
    adopted = []
    for pid in members:
        with contextlib.suppress(psutil.Error):
            adopted += [c for c in psutil.Process(pid).children(recursive=True)
                        if c.pid not in members]
    swept = kill_run_cgroups(members) + end_dead_engines_cgroups()
    for child in adopted:
        with contextlib.suppress(psutil.Error):
            child.kill()
    for group in other_groups | ({pgid} if members else set()):
        kill_group(group, signal.SIGKILL)
    return max(len(members) + len(adopted), swept)


async def supervise(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    timeout_s: float,
    on_event: EventHandler,
    stop: asyncio.Event,
    on_spawn: Callable[[int, int], None] | None = None,
    keep_fds: Sequence[int] = (),
) -> ChildOutcome:
    """Run one runner child to its end.

    Args:
        argv: interpreter, runner script, spec file (no shell).
        env: the child's complete environment; ``DLTOP_EVENT_FD`` is added here.
        log_path: file that receives the child's stdout and stderr.
        timeout_s: wall-clock budget for the whole run, start-up included.
        on_event: called with each decoded protocol event, in order.
        stop: when set, the run is cancelled (TERM, then KILL, of its group).
        on_spawn: called with (pid, pgid) as soon as the child exists.
        keep_fds: descriptors the child inherits (its device lease locks, so
            that an orphaned runner keeps its devices leased).

    Returns:
        The classified outcome; the process group is gone when this returns.
    """
    read_fd, write_fd = os.pipe()
    t0 = time.monotonic()
    token = secrets.token_hex(8)
    scope = RunScope(token)
    log_fd = -1
    try:
        # never through a planted link (jobs.rundir made the file, 0600)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                         0o600)
        # Popen here forks and execs as asyncio.create_subprocess_exec does inside the
        # loop; only the wait (wait4, for the rusage) differs, and that is in a thread.
        proc = _Child(subprocess.Popen(  # noqa: ASYNC220
            list(argv), stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
            # the log is a file dltop reads as UTF-8, whatever the user's terminal takes
            # (PYTHONIOENCODING=latin-1 crashed a runner printing a label with a `†`)
            env={**env, "DLTOP_EVENT_FD": str(write_fd), "PYTHONUNBUFFERED": "1",
                 "PYTHONIOENCODING": "utf-8", RUN_TOKEN: token},
            pass_fds=(write_fd, *keep_fds), start_new_session=True,
            preexec_fn=scope.preexec,  # joins the run's cgroup before exec
        ), own_peak_rss_bytes())
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(read_fd)
        await asyncio.to_thread(scope.end)
        return ChildOutcome(RunStatus.CRASHED, message=f"cannot start runner {argv[0]}: {exc}")
    finally:
        # The child holds its own copies; ours must close so EOF means "child gone".
        for fd in (write_fd, log_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
    pgid = proc.pid  # start_new_session: the child leads its own group
    scope.started(proc.pid)
    if on_spawn is not None:
        on_spawn(proc.pid, pgid)
    reader = EventReader(on_event)
    pump = asyncio.create_task(reader.pump(read_fd))
    waiter = asyncio.create_task(proc.wait())
    stopper = asyncio.create_task(stop.wait())
    tracker = asyncio.create_task(_track(scope))
    reason: RunStatus | None = None
    try:
        done = await _wait_awake(waiter, stopper, timeout_s, proc.pid)
        if waiter not in done:
            reason = RunStatus.CANCELLED if stopper in done else RunStatus.TIMEOUT
            await terminate_group(proc, pgid)
        # Drain what the child wrote before it died; a grandchild may hold the
        # pipe open, so bound the wait.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(pump), timeout=2.0)
    except asyncio.CancelledError:
        reason = RunStatus.CANCELLED
        await asyncio.shield(terminate_group(proc, pgid))
        raise
    finally:
        tracker.cancel()
        kill_group(pgid, signal.SIGKILL)
        leftovers = await asyncio.shield(asyncio.to_thread(scope.end))
        stopper.cancel()
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump
        reader.close()
    exit_code = proc.returncode
    wall_s = time.monotonic() - t0
    status, kind, message = classify_outcome(reason, exit_code, reader, timeout_s)
    return ChildOutcome(
        status=status, exit_code=exit_code, pid=proc.pid, pgid=pgid, wall_s=wall_s,
        message=message, error_kind=kind, protocol_errors=reader.protocol_errors,
        protocol_note=reader.protocol_note, profile_refused=reader.profile_refused,
        log_tail=read_log_tail(log_path) if status != RunStatus.OK else "",
        hello=({**reader.hello, "process_cleanup": scope.method,
                "leftover_processes": leftovers} if reader.hello else reader.hello),
        model=reader.model, done=reader.done or {}, rss_peak_kernel_bytes=proc.maxrss_bytes,
    )


async def _track(scope: RunScope) -> None:
    """List the run's descendants while it runs (the sweep's memory of who is whose)."""
    if scope.method != SWEEP:
        return
    while True:
        await asyncio.to_thread(scope.track)
        await asyncio.sleep(TRACK_S)


async def _wait_awake(waiter: asyncio.Task[int], stopper: asyncio.Task[Any], timeout_s: float,
                      pid: int) -> set[asyncio.Task[Any]]:
    """Wait for the child's exit or a stop; an empty set when ``timeout_s`` ran out.

    The deadline counts the time the engine was awake to watch the run. When the
    engine itself was stopped (Ctrl-Z, SIGSTOP, a paused VM), a watch step ends
    late; the lateness is added to the deadline, because the run is not to blame:
    it went on meanwhile, or sat blocked on an event pipe nobody read. A child
    that has exited by the time the deadline is checked is never a timeout: its
    own events say how it ended.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        step = min(WATCH_STEP_S, deadline - loop.time())
        if step <= 0:
            if _exited(pid):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter), timeout=TERM_GRACE_S)
            return {waiter} if waiter.done() else set()
        t0 = loop.time()
        done, _ = await asyncio.wait({waiter, stopper}, timeout=step,
                                     return_when=asyncio.FIRST_COMPLETED)
        if done:
            return done
        late = loop.time() - t0 - step
        if late > STALL_S:
            deadline += late


def _exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


async def terminate_group(proc: asyncio.subprocess.Process | _Child, pgid: int,
                          grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM the process group, SIGKILL it if ``proc`` has not exited within ``grace_s``."""
    kill_group(pgid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout=grace_s)
    except TimeoutError:
        kill_group(pgid, signal.SIGKILL)
        await proc.wait()
