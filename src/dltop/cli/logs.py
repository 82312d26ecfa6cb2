"""``dltop log RUN [--tail N] [--follow]``: print a run's ``runner.log``.

The path comes from ``runs.log_path`` (absolute; a relative one, from an older
dltop, is resolved beside the database, so the command works from any directory).
To a terminal, every line passes through :func:`dltop.textsafe.multiline`
(control characters escaped: a program's output cannot drive the terminal); piped
or redirected, the bytes are copied as written, like ``cat``. The log is read in
chunks (``--tail`` reads backwards from its end), never whole. ``--follow`` keeps
printing what the runner writes until the run has ended and the log stopped
growing (or Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from dltop.errors import UserError

FOLLOW_S = 0.5
CHUNK = 1 << 20


class _Out:
    """Stdout for log text: raw bytes when piped, escaped lines on a terminal."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self._partial = b""

    def write(self, data: bytes, final: bool = False) -> None:
        if not self.tty:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        from dltop.textsafe import multiline

        data = self._partial + data
        cut = len(data) if final else data.rfind(b"\n") + 1
        self._partial = data[cut:]
        if cut:
            sys.stdout.write(multiline(data[:cut].decode("utf-8", errors="replace")))
            sys.stdout.flush()


def cmd_log(args: argparse.Namespace) -> int:
    from dltop.cli.report import run_ids
    from dltop.live.logfile import open_log, tail_lines
    from dltop.store.db import resolve_db_path
    from dltop.store.read.rundetail import pruned, run_log
    from dltop.store.reader import open_reader

    given = args.run
    (args.run, *more) = run_ids(given, args.db, "RUN", several=False)
    if more:
        raise UserError(f"RUN: one run's log at a time, got {given!r}")
    db = open_reader(resolve_db_path(args.db))
    row = run_log(db, args.run)
    if row is None:
        raise UserError(f"run {args.run} not found in the database ('dltop runs' lists runs)")
    status, path = row
    if not path:
        raise UserError(f"run {args.run} has no log: it never started a runner "
                        f"(status {status})")
    try:
        os.close(open_log(path))
    except FileNotFoundError:
        why = "deleted by dltop prune" if pruned(db, args.run) else "pruned or deleted"
        raise UserError(f"run {args.run}'s log {path} is missing ({why})") from None
    except OSError as exc:
        raise UserError(f"run {args.run}'s log {path} cannot be read: "
                        f"{exc.strerror or exc}") from None
    out = _Out()
    if args.tail is not None:
        lines, offset = tail_lines(path, args.tail)
        out.write("".join(line + "\n" for line in lines).encode("utf-8"), final=True)
    else:
        offset = _copy(path, 0, out)
    if args.follow:
        _follow(db, args.run, path, offset, out)
    out.write(b"", final=True)
    return 0


def _copy(path: str, offset: int, out: _Out) -> int:
    """Write the log from ``offset`` to its current end; return the new offset."""
    from dltop.live.logfile import open_log

    fd = open_log(path)
    try:
        size = os.fstat(fd).st_size
        if size < offset:  # the log was truncated: start again
            offset = 0
        while offset < size:
            data = os.pread(fd, min(CHUNK, size - offset), offset)
            if not data:
                break
            out.write(data)
            offset += len(data)
    finally:
        os.close(fd)
    return offset


def _follow(db: Any, run_id: int, path: str, offset: int, out: _Out) -> None:
    from dltop.catalog import RunStatus
    from dltop.store.read.rundetail import run_log

    while True:
        running = (run_log(db, run_id) or ("",))[0] == RunStatus.RUNNING
        try:
            new = _copy(path, offset, out)
        except FileNotFoundError:
            return
        if not running and new == offset:
            return  # ended, and nothing written since the last look
        offset = new
        time.sleep(FOLLOW_S)
