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
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from dltop.errors import UserError
from dltop.jobs import rundir
from dltop.store import guard


class RunWrites:
    """The writes of one run queued behind each other on the engine's writer thread."""

    def __init__(self, writer: Executor, db_label: str) -> None:
        self._writer = writer
        self._label = db_label
        self._lock = threading.Lock()
        self._pending: list[Future[None]] = []
        self.failed = 0
        self.failed_batches = 0
        self.lost_rows = 0
        """Iteration rows in batches that could not be stored."""
        self.first_error: str | None = None

    def later(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``; :meth:`settled` waits for it (it never raises)."""
        self._pending.append(self._writer.submit(self._guarded, fn, args))

    async def settled(self) -> None:
        """Wait until every queued write has run (their failures are kept, never raised)."""
        await asyncio.gather(*(asyncio.wrap_future(f) for f in self._pending))

    def _guarded(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            guard.call(self._label, fn, *args)
        except Exception as exc:  # one failed write must not end the engine (issue 20)
            with self._lock:
                self.failed += 1
                # add_iterations(run_id, rows): what the note counts as lost rows
                if getattr(fn, "__name__", "") == "add_iterations" and len(args) == 2:
                    self.lost_rows += len(args[1])
                    self.failed_batches += 1
                if self.first_error is None:
                    self.first_error = (str(exc) if isinstance(exc, guard.StorageError)
                                        else f"{type(exc).__name__}: {exc}")

    def note(self) -> str | None:
        """``storage: 25 iteration rows not stored (...)``, or None when every write succeeded."""
        if not self.failed:
            return None
        parts = []
        if self.lost_rows:
            parts.append(f"{self.lost_rows} iteration rows not stored")
        if self.failed > self.failed_batches:
            parts.append(f"{self.failed - self.failed_batches} other writes failed")
        return f"storage: {', '.join(parts)} ({self.first_error})"


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
