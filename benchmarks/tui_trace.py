"""Run ``dltop`` with a trace of what the viewer's event loop and collector spend time on.

Used by ``benchmarks/tui_latency.py --trace FILE`` to explain slow keypresses: every
event-loop callback longer than ``--min-ms`` (what ran, for how long), every garbage
collection (generation, duration), every key the app received and every frame written
to the terminal, each stamped with ``time.monotonic()`` (system-wide on Linux, so the
benchmark's own timestamps line up with them).

    python benchmarks/tui_trace.py TRACE.jsonl [--min-ms 3] -- tui --fake-gpus 8
"""

from __future__ import annotations

import asyncio.events
import cProfile
import gc
import json
import os
import sys
import threading
import time
from typing import Any, TextIO


class Trace:
    """Appends one JSON line per event (any thread; written at exit)."""

    def __init__(self, out: TextIO, min_s: float) -> None:
        self.out, self.min_s = out, min_s
        self.rows: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, kind: str, t0: float, dt: float, **what: Any) -> None:
        with self.lock:
            self.rows.append({"kind": kind, "t": t0, "ms": round(dt * 1000, 2), **what})

    def flush(self) -> None:
        with self.lock:
            for row in self.rows:
                self.out.write(json.dumps(row) + "\n")
            self.rows.clear()
        self.out.flush()


def install(trace: Trace) -> None:
    """Hook the event loop's callbacks, the collector, key dispatch and terminal writes."""
    handle_run = asyncio.events.Handle._run

    def timed_run(self: asyncio.events.Handle) -> None:
        t0 = time.monotonic()
        handle_run(self)
        dt = time.monotonic() - t0
        if dt >= trace.min_s:
            cb = getattr(self, "_callback", None)
            task = getattr(cb, "__self__", None)
            coro = getattr(task, "get_coro", lambda: None)() if task is not None else None
            name = getattr(coro, "__qualname__", None) or repr(cb)[:120]
            trace.add("loop", t0, dt, what=name)

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

    gc_start: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start["t"] = time.monotonic()
        elif "t" in gc_start:
            t0 = gc_start.pop("t")
            trace.add("gc", t0, time.monotonic() - t0, gen=info["generation"],
                      collected=info["collected"], thread=threading.current_thread().name)

    gc.callbacks.append(on_gc)

    from textual import events
    from textual.app import App
    from textual.message_pump import MessagePump

    dispatch = MessagePump._dispatch_message
    # --profile-key K:N: cProfile the event loop from the N-th press of K to the next key
    # (into TRACE.prof), to see inside one slow press.
    want = os.environ.get("DLTOP_TRACE_PROFILE_KEY", "")
    profiled: dict[str, Any] = {"seen": 0, "prof": None}

    def profile_key(key: str, t: float) -> None:
        # The app sees each press twice (from the driver, then bubbled up from the screen).
        if t - profiled.get("t", 0.0) < 0.005:
            return
        profiled["t"] = t
        if profiled["prof"]:  # a Profile while profiling; False once written
            profiled["prof"].disable()
            profiled["prof"].dump_stats(trace.out.name + ".prof")
            profiled["prof"] = False
        if want and profiled["prof"] is None and key == want.split(":")[0]:
            profiled["seen"] += 1
            if profiled["seen"] == int(want.split(":")[1]):
                profiled["prof"] = cProfile.Profile()
                profiled["prof"].enable()

    async def timed_dispatch(self: MessagePump, message: Any) -> None:
        t0 = time.monotonic()
        if isinstance(message, events.Key) and isinstance(self, App):
            trace.add("key", t0, 0.0, key=message.key)
            profile_key(message.key, t0)
        await dispatch(self, message)
        dt = time.monotonic() - t0
        if dt >= trace.min_s:
            trace.add("msg", t0, dt, pump=type(self).__name__, msg=type(message).__name__)

    MessagePump._dispatch_message = timed_dispatch  # type: ignore[method-assign]

    display = App._display

    def timed_display(self: App[Any], screen: Any, renderable: Any) -> None:
        t0 = time.monotonic()
        display(self, screen, renderable)
        if renderable is not None and not self._batch_count:
            trace.add("paint", t0, time.monotonic() - t0, screen=type(screen).__name__)

    App._display = timed_display  # type: ignore[method-assign]

    from dltop.tui.app import DltopApp

    read = DltopApp._read_campaign

    def timed_read(self: DltopApp, force: bool = True) -> Any:
        t0 = time.monotonic()
        out = read(self, force)
        trace.add("db-read", t0, time.monotonic() - t0, changed=out[0])
        return out

    DltopApp._read_campaign = timed_read  # type: ignore[method-assign]


def main() -> int:
    argv = sys.argv[1:]
    sep = argv.index("--")
    opts, rest = argv[:sep], argv[sep + 1:]
    min_ms = float(opts[opts.index("--min-ms") + 1]) if "--min-ms" in opts else 3.0
    with open(opts[0], "w") as out:
        trace = Trace(out, min_ms / 1000)
        install(trace)

        def flusher() -> None:
            while True:
                time.sleep(1.0)
                trace.flush()

        threading.Thread(target=flusher, daemon=True).start()
        from dltop.cli import main as dltop_main

        try:
            return dltop_main(rest)
        finally:
            trace.flush()


if __name__ == "__main__":
    raise SystemExit(main())
