"""A run's background writes: queued on the writer thread, each failure kept, none fatal.

Iteration batches, the child's pid and the run's settings are written while the
run goes on, without waiting for them. A batch SQLite refuses (a full disk, a
value it cannot hold) loses its own rows only: the run's other batches and its
summary are still stored, the queue goes on, and the run's note says how many
rows were lost and why. Locks are waited out first (:func:`dltop.store.guard.call`).
:func:`check_runs_dir` checks at preflight that run directories can be written.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop.errors import UserError
from dltop.jobs import rundir
from dltop.store import guard

if TYPE_CHECKING:  # annotations only: the engine hands the sampler's batches over
    from dltop.telemetry.windows import Batch

ITERATION_ROWS = "iteration rows"
"""What an iteration batch's write stores (the note counts the rows lost)."""


class RunWrites:
    """The writes of one run queued behind each other on the engine's writer thread.

    Each write says what it stores (``what``, and ``count`` items of it), so that a
    failed one is named in the run's note by what was lost, whatever function wrote
    it; its error is classified by the exception's type (:func:`failure_text`).
    """

    def __init__(self, writer: Executor, db_label: str) -> None:
        self._writer = writer
        self._label = db_label
        self._lock = threading.Lock()
        self._pending: list[Future[None]] = []
        self.failed = 0
        self._failed_named = 0
        self.lost: dict[str, int | None] = {}
        """What the failed writes held, by ``what``: items lost (None: one thing, as
        an operator profile)."""
        self.first_error: str | None = None

    def later(self, fn: Callable[..., Any], *args: Any, what: str | None = None,
              count: int | None = None) -> None:
        """Queue ``fn(*args)``; :meth:`settled` waits for it (it never raises).

        Args:
            fn: the store's write.
            what: what it stores, as the note names it when the write fails
                (:data:`ITERATION_ROWS`, ``catalog.OPERATOR_PROFILE``...); None: a
                write the note counts among "other writes".
            count: how many of ``what`` (rows); None: one thing.
        """
        self._pending.append(self._writer.submit(self._guarded, fn, args, what, count))

    async def settled(self) -> None:
        """Wait until every queued write has run (their failures are kept, never raised)."""
        await asyncio.gather(*(asyncio.wrap_future(f) for f in self._pending))

    def _guarded(self, fn: Callable[..., Any], args: tuple[Any, ...], what: str | None,
                 count: int | None) -> None:
        try:
            guard.call(self._label, fn, *args)
        except Exception as exc:  # one failed write must not end the engine (issue 20)
            with self._lock:
                self.failed += 1
                if what is not None:
                    self._failed_named += 1
                    before = self.lost.get(what)
                    self.lost[what] = None if count is None else (before or 0) + count
                if self.first_error is None:
                    self.first_error = failure_text(exc)

    def note(self) -> str | None:
        """``storage: 25 iteration rows not stored, operator profile not stored (...)``,
        or None when every write succeeded."""
        if not self.failed:
            return None
        parts = [f"{what} not stored" if n is None else f"{n} {what} not stored"
                 for what, n in self.lost.items()]
        others = self.failed - self._failed_named
        if others > 0:
            parts.append(f"{others} other writes failed")
        return f"storage: {', '.join(parts)} ({self.first_error})"



def failure_text(exc: BaseException) -> str:
    """A failed write's cause for the note, by the exception's type: the database's
    refusal as :mod:`dltop.store.guard` words it (its label and SQLite's reason), else
    the exception's class and text (a value dltop could not write: a bug to report)."""
    if isinstance(exc, guard.StorageError):
        return str(exc)
    if isinstance(exc, (sqlite3.Error, OverflowError)):  # not through guard.call
        return f"SQLite: {guard.describe(exc)}"
    return f"{type(exc).__name__}: {exc}"


class TelemetryLoss:
    """Telemetry batches the database refused, counted per run for the run's note.

    The sampler's batches are written on the engine's writer thread, apart from any
    run's writes; a refused one loses its windows and never ends the engine. Each
    window carries its run (None between runs): a run's lost windows go in its note
    once its telemetry summary is written (:meth:`note`). A batch lost after that (the
    run's last windows flushed late) counts in :attr:`batches` only.
    """

    def __init__(self) -> None:
        self.batches = 0
        self.first_error: str | None = None
        self._windows: dict[int, int] = {}

    def add(self, batch: Batch, exc: BaseException) -> None:
        """Count a refused ``batch`` (on the writer thread)."""
        self.batches += 1
        if self.first_error is None:
            self.first_error = failure_text(exc)
        for windows in (batch.gpu, batch.host):
            for w in windows:
                if w.run_id is not None:
                    self._windows[w.run_id] = self._windows.get(w.run_id, 0) + 1

    def note(self, run_id: int) -> str | None:
        """``telemetry: 12 sample windows not stored (...)`` for ``run_id`` (once; None
        when none of its windows was lost)."""
        n = self._windows.pop(run_id, 0)
        if not n:
            return None
        return f"telemetry: {n} sample window{'s' if n > 1 else ''} not stored " \
               f"({self.first_error})"


def join_notes(*notes: str | None) -> str | None:
    """The run's note: its parts joined with ``; `` (None when there is none)."""
    kept = [n for n in notes if n]
    return "; ".join(kept) if kept else None


def check_runs_dir(path: Path) -> None:
    """Make sure run directories can be created in ``path`` (``<db stem>-runs``), at preflight.

    Raises:
        UserError: the directory cannot be created or written (its permissions, a
            read-only file system), before the campaign is stored.
    """
    if not path.parent.is_dir():
        return  # dltop creates the database's directory (0700) and can write in it
    try:
        try:
            rundir.ensure_private_dir(path)  # created 0700, as the engine would
        except rundir.UnsafeRunDir:
            return  # each run refuses it and stores why (dltop.jobs.rundir)
        fd, probe = tempfile.mkstemp(prefix=".dltop-write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the runs directory ({exc.strerror or exc}); "
                        "each run keeps its spec and log there, beside the database") from None
