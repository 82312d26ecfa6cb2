"""A runner's events, decoded and checked, and how its end is classified.

Shared by the local supervisor (:mod:`dltop.jobs.supervisor`: the events pipe) and
the Slurm executor (:mod:`dltop.jobs.executors.slurm`: the events file on a shared filesystem):
bytes are fed as they come, split into lines (an over-long line is refused, not
buffered), each checked against the protocol (:mod:`dltop.jobs.protocol`) before
it reaches the engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Callable
from typing import Any

from dltop.catalog import ERROR_KIND_STATUS, ErrorKind, RunStatus
from dltop.jobs.protocol import MAX_EVENT_DEPTH, EventChecker, too_deep

MAX_EVENT_LINE_BYTES = 1 << 20
"""Longer event lines are discarded and counted as protocol errors."""
_PROFILE_NAME = re.compile(rb'"event"\s*:\s*"profile"')
EventHandler = Callable[[dict[str, Any]], None]


def classify_outcome(reason: RunStatus | None, exit_code: int | None, r: EventReader,
                     timeout_s: float) -> tuple[RunStatus, str | None, str | None]:
    """(status, error kind, message) of a run that ended: why dltop ended it (cancel,
    timeout) first, then the runner's own error, then its ``done`` and exit status."""
    if reason == RunStatus.CANCELLED:
        return RunStatus.CANCELLED, None, "cancelled by the user"
    if reason == RunStatus.TIMEOUT:
        return RunStatus.TIMEOUT, None, f"no result within timeout_s = {timeout_s:g}"
    if r.extra_runner is not None:
        # Two runners wrote one run's events: its iterations are not the job asked for.
        return RunStatus.CRASHED, None, r.extra_runner
    if r.error is not None:
        kind = str(r.error.get("kind", ErrorKind.CRASH))
        return ERROR_KIND_STATUS.get(kind, RunStatus.CRASHED), kind, str(r.error.get("message", ""))
    if r.done is not None and exit_code == 0:
        if r.measured == 0:
            return RunStatus.CRASHED, None, "runner reported done without any measured iteration"
        return RunStatus.OK, None, None
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = str(-exit_code)
        return RunStatus.CRASHED, None, f"runner killed by signal {name} before finishing"
    if r.done is None:
        return (RunStatus.CRASHED, None,
                f"runner exited with status {exit_code} without a 'done' event")
    return RunStatus.CRASHED, None, f"runner reported done but exited with status {exit_code}"


class EventReader:
    """Decodes a runner's JSON-line events: fed bytes (:meth:`feed`), or a pipe (:meth:`pump`)."""

    def __init__(self, on_event: EventHandler) -> None:
        self._on_event = on_event
        self._transport: asyncio.ReadTransport | None = None
        self.protocol_errors = 0
        self.protocol_note: str | None = None
        self.profile_refused: str | None = None
        """Why the run's ``profile`` event was refused (None: none was): its operator
        profile is then not stored, which the run's note says."""
        self._checker = EventChecker()
        self.hello: dict[str, Any] = {}
        self.extra_runner: str | None = None
        """Set when a second runner (a ``hello`` from another pid) reported: the run
        is failed with this reason, whatever its ``done`` says."""
        self.model: dict[str, Any] = {}
        self.error: dict[str, Any] | None = None
        self.done: dict[str, Any] | None = None
        self.measured = 0
        self._buf = bytearray()
        self._discarding = False
        self._tail = b""
        self._long_line = f"an event line over {MAX_EVENT_LINE_BYTES} bytes"

    async def pump(self, fd: int) -> None:
        """Read the pipe ``fd`` to its end."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe)
        self._transport = transport
        while chunk := await reader.read(1 << 16):
            self.feed(chunk)
        self.finish()

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream: each whole line is an event."""
        self._buf += chunk
        while (nl := self._buf.find(b"\n")) >= 0:
            line = bytes(self._buf[:nl])
            del self._buf[:nl + 1]
            if self._discarding:
                self._discarding = False
                # dltop_protocol writes the event's name last: the line's end says
                # whether a profile was lost (said as such in the run's note)
                if _PROFILE_NAME.search((self._tail + line)[-64:]) \
                        and self.profile_refused is None:
                    self.profile_refused = self._long_line
            else:
                self.handle(line)
        if len(self._buf) > MAX_EVENT_LINE_BYTES:
            if not self._discarding:
                self._refuse(self._long_line)
            self._discarding = True  # inside an over-long line: drop bytes up to its newline
            self._tail = bytes(self._buf[-64:])
            self._buf.clear()

    def finish(self) -> None:
        """The stream ended: a last line without its newline is an event too."""
        if self._buf and not self._discarding:
            self.handle(bytes(self._buf))
        self._buf.clear()

    def _refuse(self, why: str, name: Any = None) -> None:
        self.protocol_errors += 1
        if self.protocol_note is None:
            self.protocol_note = why
        if name == "profile" and self.profile_refused is None:
            self.profile_refused = why

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def handle(self, line: bytes) -> None:
        """One line: checked, kept where it says what the run is, passed on."""
        if too_deep(line):
            self._refuse(f"an event nested deeper than {MAX_EVENT_DEPTH} levels: {line[:60]!r}")
            return
        try:
            event = json.loads(line)
        except ValueError:
            self._refuse(f"not JSON: {line[:60]!r}")
            return
        if not isinstance(event, dict) or event.get("v") != 1 or "event" not in event:
            self._refuse(f"not a protocol v1 event: {line[:60]!r}")
            return
        problem = self._checker.problem(event)
        if problem is not None:
            self._refuse(problem, event["event"])
            return
        name = event["event"]
        if name == "hello":
            first = self.hello.get("pid")
            if first is not None and event.get("pid") not in (None, first) \
                    and self.extra_runner is None:
                self.extra_runner = (f"two runners reported (pids {first} and "
                                     f"{event.get('pid')}) where the job asked for one")
            self.hello = event
        elif name == "setup":  # one-off setup times (compile_s, ...) join the hello's facts
            self.hello = {**{k: v for k, v in event.items() if k not in ("v", "event")},
                          **self.hello}
        elif name == "model":
            self.model = event
        elif name == "iter" and not event.get("warmup"):
            self.measured += 1
        elif name == "error" and self.error is None:
            self.error = event
        elif name == "done":
            self.done = event
        self._on_event(event)

