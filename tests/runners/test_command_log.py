"""The command runner's output handling, in process: line splitting, the capped log."""

from __future__ import annotations

import os
from pathlib import Path

import command_timing as ct  # type: ignore[import-not-found]  # a child module (conftest)


def test_lines_split_on_carriage_returns_and_keep_what_a_terminal_shows() -> None:
    lines = ct.Lines()
    got = lines.feed(b"epoch 1\r\n 10%|#| 1/10 [1.5it/s]\r 20%|##| 2/10 [1.6it/s]")
    assert got == ["epoch 1", " 10%|#| 1/10 [1.5it/s]"]
    assert lines.feed(b"\rdone\n\x1b[31mred\x1b[0m \x07bell\n") == [
        " 20%|##| 2/10 [1.6it/s]", "done", "\x1b[31mred\x1b[0m \x07bell"]
    assert lines.last_lines() == ["epoch 1", "done", "red ?bell"]  # no escapes, no controls
    assert lines.end() == []


def test_a_line_without_end_is_matched_in_pieces() -> None:
    lines = ct.Lines()
    got = lines.feed(b"x" * (ct.MAX_LINE_CHARS + 10))
    assert [len(t) for t in got] == [ct.MAX_LINE_CHARS]
    assert lines.end() == ["x" * 10]


def test_the_log_keeps_its_head_and_its_tail(tmp_path: Path) -> None:
    path = tmp_path / "runner.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    log = ct.CappedLog(fd)
    chunk = b"y" * 65535 + b"\n"
    for i in range(80):  # 5 MiB, numbered chunks
        log.write(b"%08d" % i + chunk[8:])
    os.close(fd)
    data = path.read_bytes()
    assert len(data) <= ct.LOG_HEAD_BYTES + 200 + 2 * ct.LOG_TAIL_BYTES
    assert data.startswith(b"00000000") and b"runner.log capped" in data
    assert b"00000079" in data[-ct.LOG_TAIL_BYTES:] and b"00000040" not in data


def test_a_full_disk_stops_the_log_not_the_run() -> None:
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        log = ct.CappedLog(fd)
        log.write(b"step 0 took 0.1s\n")  # ENOSPC: remembered, not raised
        log.write(b"step 1 took 0.1s\n")
        assert log.failed is not None and "No space" in str(log.failed)
    finally:
        os.close(fd)
