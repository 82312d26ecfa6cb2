"""One server per configuration group of serve runs (``server_scope = "group"``, issue 41).

The consecutive runs whose server is the same (command line, readiness URL, timeout,
endpoint template, model, devices) share one server: repeats, ``request_rate`` and
``concurrency`` sweeps of one engine. The engine starts it through its supervisor
(:func:`dltop.jobs.supervisor.supervise`: the only code that starts or kills processes)
as a long-lived child of its own, ``openai_server.py`` run as a program, which starts the
server, reports it ready and holds it. Each run's runner is given its endpoint
(``DLTOP_SHARED_SERVER``), the way a run against an already-serving endpoint is.

A server is stopped (the supervisor's TERM to its host, which stops the server's group:
TERM, KILL after 5 s; then the sweep of the host's whole tree) when a run of another
configuration starts, when a run on some of its devices starts that is not its group's
(packed runs: a group's runs on other GPUs have servers of their own, its siblings, which
go on), when a run of its group did not end ``ok`` (the next run of the group starts a
fresh one), and when the campaign ends however it ends. A server in use, or still
starting, is stopped when its last user ends. Should the engine
die outright, the host sees itself reparented and stops the server (and ``--resume``'s
reaping ends a dead engine's run cgroups, the host's included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dltop.catalog import RunStatus
from dltop.jobs.rundir import SERVER_LOG
from dltop.jobs.supervisor import ChildOutcome, supervise
from dltop.procs import read_log_tail
from dltop.profiles.jobspec import JobSpec
from dltop.telemetry.sampler import Sampler

ENV = "DLTOP_SHARED_SERVER"
"""The variable that gives a run's runner the group's server (JSON)."""
HOST_TIMEOUT_S = 10 * 365 * 86400.0
"""The host's deadline: none in practice (it lives as long as its group)."""
REMOTE_END_S = 3.0
"""How long a failed run waits to see whether its group's Slurm job ended too."""


@dataclass(frozen=True)
class Key:
    """What makes two runs' servers the same."""

    config: tuple[Any, ...]
    """The server's configuration (command, readiness, endpoint, model; on Slurm the
    allocation's shape too): its group."""
    gpus: tuple[int, ...]
    """This host's GPUs the server runs on (empty: none, or a Slurm job's)."""

    def extended(self, *more: Any) -> Key:
        """The key with more of the configuration (a Slurm allocation's shape)."""
        return replace(self, config=(*self.config, *more))

    def displaces(self, other: Key | None) -> bool:
        """Whether a run of ``other`` starting ends this key's server (once not in use):
        another configuration (the group has ended), or the same on some of its GPUs."""
        return other is None or (other != self and (
            other.config != self.config or not set(other.gpus).isdisjoint(self.gpus)))

HostLaunch = Callable[[Sequence[str], Path, Mapping[str, str], Callable[[dict[str, Any]], None],
                       Callable[[int, int], None], asyncio.Event],
                      Coroutine[Any, Any, ChildOutcome]]
"""Starts a group's host (argv, log, env, on_event, on_spawn, stop) and follows it to its
end: :func:`local_host` here, or a Slurm job of its own
(:mod:`dltop.jobs.executors.slurm_group`)."""


def local_host(argv: Sequence[str], log_path: Path, env: Mapping[str, str],
               on_event: Callable[[dict[str, Any]], None],
               on_spawn: Callable[[int, int], None], stop: asyncio.Event,
               ) -> Coroutine[Any, Any, ChildOutcome]:
    """The host as a child of this engine's supervisor."""
    return supervise([*argv, str(log_path)], env=env, log_path=log_path,
                     timeout_s=HOST_TIMEOUT_S, on_event=on_event, stop=stop,
                     on_spawn=on_spawn)


def group_key(job: JobSpec, gpus: Sequence[int]) -> Key | None:
    """What makes two runs' servers the same; None when the run starts its own (or none)."""
    opts = dict(job.options)
    if not opts.get("server_command") or opts.get("server_scope", "group") != "group":
        return None
    return Key((opts["server_command"], opts.get("server_ready_url"),
                opts.get("server_timeout_s"), opts.get("endpoint"), job.model), tuple(gpus))


@dataclass
class _Shared:
    """One started server and the runs using it."""

    key: Key
    first_run: int
    log_path: Path
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    users: int = 1
    """The runs using it (its first run from the start: nothing stops it under them)."""
    retired: bool = False
    host_pid: int = 0
    remote: bool = False
    """Its host is a Slurm job: not a child of this engine."""
    task: asyncio.Task[ChildOutcome] | None = None


class ServerGroups:
    """The servers an engine shares between the runs of a group (one per key at a time)."""

    def __init__(self, sampler: Sampler | None) -> None:
        self._servers: dict[Key, _Shared] = {}
        self._sampler = sampler
        self._turns: dict[Key, asyncio.Lock] = {}
        self._starts: dict[Key, asyncio.Lock] = {}
        """One start at a time per key: a packed run of the key waits for its sibling's."""
        self._holders: dict[int, _Shared | None] = {}
        """The runs that acquired a server (None: its failure) and have not released it."""
        self._failed: dict[Key, str] = {}
        """A Slurm group whose server failed to start: its later runs start none."""

    async def acquire(self, key: Key | None, run_id: int, argv: Sequence[str],
                      run_dir: Path, env: Mapping[str, str], cancel: asyncio.Event,
                      launch: HostLaunch = local_host) -> dict[str, Any] | None:
        """The server for a run of ``key`` (None: a run that shares none), started if need be.

        Any other server it displaces (:meth:`Key.displaces`) is stopped once not in use.

        Args:
            key: :func:`group_key` of the run.
            run_id: the run (the first run of a new server: its log is in its folder).
            argv: the host's command (interpreter, ``openai_server.py``, the run's spec).
            run_dir: the run's folder, holding its ``server.log``.
            env: the run's environment (its devices), the server's too.
            cancel: the run's stop: set while the server starts, it is stopped.
            launch: where the host runs; other than :func:`local_host` (a Slurm job),
                the group's runs take turns (Slurm runs up to ``slurm.parallel`` at
                once): one at a time against the server, in the engine's order.

        Returns:
            What the runner is told (``ENV``): endpoint, cold start and the Slurm job's
            queue facts (on the first run only), pid, the run that started it, the log
            and the offset this run's part of it starts at; or ``{"failed": message}``
            (a Slurm group's later runs get its first failure: none starts another);
            None for ``key`` None. A run that gets one must :meth:`release` it.
        """
        for other in list(self._servers.values()):
            if other.key.displaces(key):
                other.retired = True
                if other.users == 0:
                    await self._stop(other)
        self._failed = {k: v for k, v in self._failed.items() if k == key}
        if key is None:
            return None
        if launch is not local_host:
            await self._turns.setdefault(key, asyncio.Lock()).acquire()
        try:
            async with self._starts.setdefault(key, asyncio.Lock()):
                shared, served = await self._serve(key, run_id, argv, run_dir, env, cancel,
                                                   launch)
        except BaseException:
            self._next_turn(key)  # its run never gets to release it
            raise
        self._holders[run_id] = shared
        return served

    async def _serve(self, key: Key, run_id: int, argv: Sequence[str], run_dir: Path,
                     env: Mapping[str, str], cancel: asyncio.Event,
                     launch: HostLaunch) -> tuple[_Shared | None, dict[str, Any]]:
        if key in self._failed:
            return None, {"failed": self._failed[key]}
        if cancel.is_set():  # stopped while it waited its turn, or its sibling's start
            return None, {"failed": "cancelled before the server started"}
        shared = self._servers.get(key)
        if shared is not None and (shared.task is None or shared.task.done()):
            await self._stop(shared)  # it died since the last run
            shared = None
        elif shared is not None and shared.retired:  # a failed run's: a fresh one (the
            del self._servers[key]                    # old stops as its last user ends)
            shared = None
        first = shared is None
        if shared is None:
            shared = await self._start(key, run_id, argv, run_dir / SERVER_LOG, env, cancel,
                                       launch)
            if shared.error is not None:
                await self._stop(shared)
                if shared.remote and not cancel.is_set():
                    # the same command on the same allocation's shape fails alike: on
                    # Slurm each retry would wait in the queue again for nothing
                    self._failed[key] = (f"the group's server failed to start for run "
                                         f"{run_id}: {shared.error}")
                return None, {"failed": shared.error}
        else:
            shared.users += 1
        if self._sampler is not None and shared.host_pid:  # its tree is the run's own
            self._sampler.shared_roots[run_id] = shared.host_pid
        offset = shared.log_path.stat().st_size if shared.log_path.exists() else 0
        return shared, {
            "endpoint": shared.ready["endpoint"], "pid": shared.ready["pid"],
            "first_run": shared.first_run, "log": str(shared.log_path), "log_offset": offset,
            "cold_start_s": shared.ready["cold_start_s"] if first else None,
            **{k: shared.ready[k] for k in ("slurm_job", "slurm_nodes") if k in shared.ready},
            **({"slurm_queue": shared.ready["slurm_queue"]}
               if first and "slurm_queue" in shared.ready else {})}

    async def ended(self, key: Key | None) -> str | None:
        """What ended the server of ``key`` (a failed run's message adds it), None if
        it serves. A Slurm job's end is seen at the next poll: waited for a moment."""
        shared = self._servers.get(key) if key is not None else None
        if shared is None or shared.task is None:
            return None
        if shared.remote:
            with contextlib.suppress(Exception):  # TimeoutError: it still serves
                await asyncio.wait_for(asyncio.shield(shared.task), REMOTE_END_S)
        done = shared.task.done() and not shared.task.cancelled()
        return _ended(shared.task, shared.log_path, "") if done else None

    def _next_turn(self, key: Key) -> None:
        turn = self._turns.get(key)
        if turn is not None and turn.locked():
            turn.release()

    async def release(self, key: Key | None, run_id: int, status: str) -> None:
        """Run ``run_id`` of ``key`` ended with ``status``: a run not ``ok`` ends its server.
        Once per acquire: a second call (a run that raised after its release) does nothing."""
        if key is not None:
            if run_id not in self._holders:
                return
            self._next_turn(key)
        shared = self._holders.pop(run_id, None)  # the one it used, whatever has the key now
        if self._sampler is not None:
            self._sampler.shared_roots.pop(run_id, None)
        if shared is None:
            return
        shared.users -= 1
        if status != RunStatus.OK:
            shared.retired = True
        if shared.retired and shared.users <= 0:
            await self._stop(shared)

    async def close(self) -> None:
        """Stop every server (the campaign ended)."""
        for shared in list(self._servers.values()):
            await self._stop(shared)

    async def _start(self, key: Key, run_id: int, argv: Sequence[str], log_path: Path,
                     env: Mapping[str, str], cancel: asyncio.Event,
                     launch: HostLaunch) -> _Shared:
        shared = self._servers[key] = _Shared(key, run_id, log_path,
                                              remote=launch is not local_host)
        ready = asyncio.Event()

        def on_event(event: dict[str, Any]) -> None:
            if event.get("event") == "server":
                shared.ready = event
                ready.set()
            elif event.get("event") == "error" and shared.error is None:
                shared.error = str(event.get("message"))

        def on_spawn(pid: int, pgid: int) -> None:
            shared.host_pid = pid

        shared.task = asyncio.create_task(launch(argv, log_path, env, on_event, on_spawn,
                                                 shared.stop))
        waits = {shared.task, asyncio.ensure_future(ready.wait()),
                 asyncio.ensure_future(cancel.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits - {shared.task}:
                w.cancel()
        if not ready.is_set() and shared.error is None:
            shared.error = ("cancelled while the server started" if cancel.is_set() else
                            _ended(shared.task, log_path))
        return shared

    async def _stop(self, shared: _Shared) -> None:
        if self._servers.get(shared.key) is shared:
            del self._servers[shared.key]
        shared.stop.set()
        if shared.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(shared.task)


def _ended(task: asyncio.Task[ChildOutcome], log_path: Path,
           when: str = " before the server was ready") -> str:
    why = repr(task.exception()) if task.exception() else task.result().message
    return (f"the shared server's host ended{when} ({why}); server.log ends: "
            f"{read_log_tail(log_path) or '(empty)'}")


def runner_env(served: dict[str, Any] | None) -> dict[str, str]:
    """The runner's variables that give it the group's server."""
    return {} if served is None else {ENV: json.dumps(served)}
