"""A runner's log read by line without loading it: an index of line starts, built by offset.

A ``runner.log`` may hold 100 MB (a program that prints every step). The log viewer
and ``dltop log`` never read it whole: :func:`scan_log` reads one chunk from a byte
offset and returns the line starts it found (a worker thread calls it chunk by chunk,
and again as a running run's log grows); :class:`LogIndex` keeps those starts (8 bytes
a line) and reads one line by its offset when it is shown. :func:`tail_lines` reads
backwards from the end for the last lines. Every open uses ``O_NOFOLLOW``, as the
engine's own log tail does: a log replaced by a link to another file is not read.

Standard library only (headless core).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path

CHUNK_BYTES = 4 << 20
"""Bytes :func:`scan_log` reads per call."""
LINE_BYTES = 8192
"""Most bytes of one line that are read for display (the rest is cut)."""


def open_log(path: Path | str) -> int:
    """A read-only descriptor of the log (raises ``OSError``, also for a symlink)."""
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


@dataclass(frozen=True)
class LogChunk:
    """What one :func:`scan_log` call found."""

    starts: array[int]
    """Start offset of each line that begins in the chunk (after each newline)."""
    end: int
    """Offset scanned up to (exclusive)."""
    longest: int
    """Longest complete line in the chunk, bytes."""
    size: int
    """The file's size when it was read."""


def scan_log(path: Path | str, offset: int, max_bytes: int = CHUNK_BYTES,
             line_start: int | None = None) -> LogChunk:
    """Line starts in ``max_bytes`` of the log from ``offset``.

    ``line_start``: where the line running at ``offset`` began (default ``offset``),
    so that a line crossing chunks is measured whole.

    Raises:
        OSError: the log cannot be opened (missing, a symlink, unreadable).
    """
    fd = open_log(path)
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, max(0, min(max_bytes, size - offset)), offset)
    finally:
        os.close(fd)
    starts: array[int] = array("q")
    longest, find = 0, data.find
    prev = (offset if line_start is None else line_start) - offset  # may be negative
    pos = find(b"\n")
    while pos >= 0:
        starts.append(offset + pos + 1)
        longest = max(longest, pos - prev)
        prev = pos + 1
        pos = find(b"\n", prev)
    return LogChunk(starts, offset + len(data), longest, size)


def decode_line(raw: bytes) -> str:
    """A log line's bytes as text (a line cut inside a character is decoded leniently)."""
    return raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


@dataclass
class LogIndex:
    """The line starts of a log read so far (filled by :meth:`add`, on one thread)."""

    path: str
    starts: array[int] = field(default_factory=lambda: array("q", [0]))
    end: int = 0
    """Bytes indexed."""
    longest: int = 0
    size: int = 0
    """The file's size at the last scan."""

    @property
    def line_count(self) -> int:
        """Lines indexed (a last line without its newline counts)."""
        return len(self.starts) - (1 if self.starts[-1] >= self.end else 0)

    @property
    def complete(self) -> bool:
        """Whether the whole file (as of the last scan) is indexed."""
        return self.end >= self.size

    def scan(self, max_bytes: int = CHUNK_BYTES) -> LogChunk:
        """:func:`scan_log` from where the index ends (any thread; :meth:`add` the result)."""
        return scan_log(self.path, self.end, max_bytes, self.starts[-1])

    def add(self, chunk: LogChunk) -> None:
        """Take a chunk that :func:`scan_log` read from :attr:`end`."""
        if chunk.end <= self.end and chunk.size == self.size:
            return
        self.starts.extend(chunk.starts)
        self.end, self.size = chunk.end, chunk.size
        tail = self.end - self.starts[-1]  # the unfinished last line counts too
        self.longest = max(self.longest, chunk.longest, tail)

    def span(self, row: int) -> tuple[int, int]:
        """Byte offsets (start, end) of line ``row``."""
        start = self.starts[row]
        end = self.starts[row + 1] if row + 1 < len(self.starts) else self.end
        return start, end

    def read_lines(self, fd: int, first: int, count: int) -> list[str]:
        """Lines ``first`` to ``first + count`` (each cut at :data:`LINE_BYTES`), read
        with one ``pread`` when they are short."""
        last = min(self.line_count, first + count)
        if first >= last:
            return []
        lo, hi = self.span(first)[0], self.span(last - 1)[1]
        if hi - lo <= 4 * LINE_BYTES * (last - first):
            blob = os.pread(fd, hi - lo, lo)
            out = []
            for row in range(first, last):
                a, b = self.span(row)
                out.append(decode_line(blob[a - lo:min(b, a + LINE_BYTES) - lo]))
            return out
        return [decode_line(os.pread(fd, min(LINE_BYTES, b - a), a))
                for a, b in map(self.span, range(first, last))]


def tail_lines(path: Path | str, n: int, block: int = 64 << 10) -> tuple[list[str], int]:
    """The last ``n`` lines of the log and the file's size (reading backwards by blocks).

    Raises:
        OSError: the log cannot be opened.
    """
    fd = open_log(path)
    try:
        size = os.fstat(fd).st_size
        data, pos = b"", size
        while pos > 0 and data.count(b"\n") <= n:
            step = min(block, pos)
            pos -= step
            data = os.pread(fd, step, pos) + data
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if pos > 0:
        lines = lines[1:]  # the first one may be cut
    return [decode_line(x) for x in lines[-n:]] if n > 0 else [], size
