"""Deeply nested event lines are protocol errors, never a dead runner or relay (issue 38).

``json.loads`` recurses once per nesting level: ``[`` x 100 000 raised RecursionError in
the command runner (its program's event pipe) and in the launcher relay, so the run
ended ``crashed``. Both sides now check the depth before decoding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import dltop_protocol
import pytest
import relay

from dltop.jobs.eventreader import EventReader
from dltop.jobs.protocol import MAX_EVENT_DEPTH, too_deep

from .conftest import RunJob

CASES = [
    (b"[" * 100_000, True),
    (b"{\"a\":" * 40 + b"1" + b"}" * 40, True),
    (b"[" * 33 + b"]" * 33, True),
    (b"[" * 32 + b"]" * 32, False),
    (json.dumps({"v": 1, "event": "x", "s": "[" * 500}).encode(), False),  # inside a string
    (b'{"s":"\\"' + b"[" * 50 + b'"}', False),  # an escaped quote does not end the string
    (b"][" * 100, False),
    (b'{"v":1,"event":"iter","index":0,"seconds":0.1}', False),
]


@pytest.mark.parametrize(("line", "deep"), CASES)
def test_both_sides_measure_depth_alike(line: bytes, deep: bool) -> None:
    assert too_deep(line) is deep
    assert dltop_protocol.too_deep(line) is deep
    assert dltop_protocol.too_deep(line.decode()) is deep
    assert MAX_EVENT_DEPTH == dltop_protocol.MAX_EVENT_DEPTH


def test_the_reader_counts_a_deep_line_and_goes_on() -> None:
    seen: list[dict[str, Any]] = []
    r = EventReader(seen.append)
    r.feed(b"[" * 100_000 + b"\n" + b'{"v":1,"event":"hello"}\n')
    r.feed(b'{"v":1,"event":"refused","why":"the program\'s event line is not JSON"}\n')
    assert r.protocol_errors == 2 and "nested deeper than 32" in str(r.protocol_note)
    assert [e["event"] for e in seen] == ["hello"]


def test_the_relay_passes_a_deep_line_on(tmp_path: Any) -> None:
    path, rfd, keep = relay.create(str(tmp_path))
    out = tmp_path / "out"
    out_w = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)  # a pipe would fill up
    deep = "[" * 100_000
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys\nwith open(sys.argv[1], 'w') as f:\n"
        f"    f.write({deep!r} + '\\n' + '{{\"v\":1,\"event\":\"done\"}}\\n')\n"), path])
    try:
        last = relay.relay(rfd, keep, out_w, writer)
    finally:
        os.close(rfd)
        os.close(out_w)
    lines = out.read_bytes().splitlines()
    assert last == "done" and writer.wait() == 0
    assert lines[0] == deep.encode() and len(lines) == 2


@pytest.mark.slow
def test_a_program_writing_deep_nesting_to_its_event_fd_stays_ok(command_job: RunJob) -> None:
    prog = ("import os\nfrom dltop_report import report\n"
            "fd = int(os.environ['DLTOP_EVENT_FD'])\n"
            "os.write(fd, b'[' * 100000 + b'\\n')\n"
            "os.write(fd, b'not json\\n')\n"
            "for i in range({total}): report(0.01)\n")
    r = command_job([sys.executable, "-c", prog], iterations=3, warmup=1)
    assert r.run["status"] == "ok" and len(r.seconds) == 4, (r.run, r.stderr)
    assert r.run["protocol_errors"] == 2, r.run
    assert "nested deeper than 32 levels" in str(r.run["note"]), r.run
