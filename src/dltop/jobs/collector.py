"""Iteration events of one run: UI progress, buffered database rows, seconds kept in memory."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from dltop.jobs.events import EngineEvent, RunProgress
from dltop.profiles.model import JobSpec
from dltop.store.writer import Store

FLUSH_INTERVAL_S = 0.5
"""Iterations reach the database at least this often while a run goes on."""


class IterationCollector:
    """Turns ``iter`` events into UI progress, buffered DB rows and in-memory seconds."""

    def __init__(self, run_id: int, job: JobSpec, emit: Callable[[EngineEvent], None],
                 store: Store, write_later: Callable[..., None]) -> None:
        self.run_id = run_id
        self.total = job.warmup + job.iterations
        self.samples_per_iter = job.samples_per_iter
        self.measured: list[float] = []
        self.last_loss: float | None = None
        self.samples_seen = 0
        self._emit = emit
        self._store = store
        self._write_later = write_later
        self._buffer: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()

    def on_event(self, event: dict[str, Any]) -> None:
        if event["event"] != "iter":
            return
        try:
            index = int(event["index"])
            seconds = float(event["seconds"])
            samples = int(event.get("samples") or self.samples_per_iter)
        except (KeyError, TypeError, ValueError):
            return  # a malformed iteration event is skipped, not fatal
        loss = _as_float(event.get("loss"))
        warmup = bool(event.get("warmup"))
        if not warmup:
            self.measured.append(seconds)
        self.samples_seen += samples
        self.last_loss = loss
        self._buffer.append({"idx": index, "seconds": seconds,
                             "samples": samples,
                             "warmup": int(warmup), "loss": loss})
        self._emit(RunProgress(self.run_id, index, self.total, warmup, seconds, loss))
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._write_later(self._store.add_iterations, self.run_id, self._buffer)
            self._buffer = []
        self._last_flush = time.monotonic()


def _as_float(value: Any) -> float | None:
    """A loss as a finite float, or None (non-finite losses are stored as NULL)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
