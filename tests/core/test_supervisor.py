"""Supervisor behaviour with real child processes (no framework needed)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.jobs.supervisor import ChildOutcome, supervise

EMIT = textwrap.dedent("""
    import json, os, sys, time
    FD = int(os.environ["DLTOP_EVENT_FD"])
    def emit(event, **kw):
        kw.update(v=1, event=event)
        os.write(FD, (json.dumps(kw) + "\\n").encode())
""")


async def run_child(tmp_path: Path, body: str, timeout_s: float = 20.0,
                    stop: asyncio.Event | None = None) -> tuple[ChildOutcome, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    code = EMIT + textwrap.dedent(body)
    outcome = await supervise(
        [sys.executable, "-c", code], env=dict(os.environ), log_path=tmp_path / "run.log",
        timeout_s=timeout_s, on_event=events.append, stop=stop or asyncio.Event(),
    )
    return outcome, events


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_group_gone(pgid: int, members: Callable[[int], list[int]]) -> None:
    left = members(pgid)
    assert not left, f"processes left in group {pgid}: {left}"


async def test_ok_run_reports_events(tmp_path: Path, group_members: Any) -> None:
    outcome, events = await run_child(tmp_path, """
        emit("hello", framework="fake", framework_version="1")
        for i in range(3):
            emit("iter", index=i, seconds=0.01, samples=4, warmup=i == 0, loss=1.0)
        print("to the log")
        emit("done", iterations=2)
    """)
    assert outcome.status == "ok", outcome
    assert outcome.exit_code == 0
    assert [e["event"] for e in events] == ["hello", "iter", "iter", "iter", "done"]
    assert outcome.hello["framework"] == "fake"
    assert "to the log" in (tmp_path / "run.log").read_text()
    assert_group_gone(outcome.pgid, group_members)


async def test_error_event_kind_maps_to_status(tmp_path: Path) -> None:
    outcome, _ = await run_child(tmp_path, """
        emit("error", kind="oom", message="CUDA out of memory")
        sys.exit(3)
    """)
    assert (outcome.status, outcome.error_kind) == ("oom", "oom")
    assert "out of memory" in (outcome.message or "")


async def test_exit_zero_without_done_is_crashed(tmp_path: Path) -> None:
    outcome, _ = await run_child(tmp_path, """
        emit("iter", index=0, seconds=0.1, samples=1, warmup=False, loss=0.5)
        print("partial output")
    """)
    assert outcome.status == "crashed"
    assert "without a 'done' event" in (outcome.message or "")
    assert "partial output" in outcome.log_tail


async def test_sigkilled_child_is_crashed_with_signal_name(tmp_path: Path) -> None:
    outcome, _ = await run_child(tmp_path, """
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert outcome.status == "crashed"
    assert "SIGKILL" in (outcome.message or "")


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_timeout_kills_the_whole_group(tmp_path: Path, group_members: Any,
                                             wait_until_async: Any) -> None:
    pidfile = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    outcome, _ = await run_child(tmp_path, f"""
        import subprocess, signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # force the KILL path
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(g.pid))
        time.sleep(600)
    """, timeout_s=1.0)
    assert outcome.status == "timeout"
    # The timeout feature itself: a 1 s limit must end a child that ignores SIGTERM and
    # would sleep 600 s. The bound is generous for a loaded machine, far below 600 s.
    assert time.monotonic() - t0 < 60
    grandchild = int(pidfile.read_text())
    await wait_until_async(lambda: gone(grandchild), 10, "the grandchild to die")
    assert_group_gone(outcome.pgid, group_members)


async def test_stop_event_cancels(tmp_path: Path, group_members: Any) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, stop.set)
    outcome, _ = await run_child(tmp_path, "time.sleep(600)", stop=stop)
    assert outcome.status == "cancelled"
    assert_group_gone(outcome.pgid, group_members)


async def test_garbage_and_huge_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    outcome, events = await run_child(tmp_path, """
        os.write(FD, b"not json\\n")
        os.write(FD, b"[1, 2]\\n")
        os.write(FD, b"x" * (10 * 1024 * 1024) + b"\\n")
        emit("iter", index=0, seconds=0.1, samples=1, warmup=False, loss=0.5)
        emit("done", iterations=1)
    """)
    assert outcome.status == "ok"
    assert outcome.protocol_errors == 3
    assert [e["event"] for e in events] == ["iter", "done"]


async def test_flooding_stdout_goes_to_log_not_pipe(tmp_path: Path) -> None:
    outcome, _ = await run_child(tmp_path, """
        for _ in range(20000):
            print("spam " * 20)
        emit("iter", index=0, seconds=0.1, samples=1, warmup=False, loss=0.5)
        emit("done", iterations=1)
    """)
    assert outcome.status == "ok"
    assert (tmp_path / "run.log").stat().st_size > 1_000_000


async def test_missing_interpreter_is_crashed_not_raised(tmp_path: Path) -> None:
    outcome = await supervise(["/nonexistent/python"], env={}, log_path=tmp_path / "l.log",
                              timeout_s=5, on_event=lambda e: None, stop=asyncio.Event())
    assert outcome.status == "crashed"
    assert "cannot start runner" in (outcome.message or "")


@pytest.mark.parametrize("kind,status", [("unsupported", "unsupported"),
                                         ("diverged", "diverged"), ("crash", "crashed")])
async def test_every_error_kind(tmp_path: Path, kind: str, status: str) -> None:
    outcome, _ = await run_child(tmp_path, f"""
        emit("error", kind={kind!r}, message="m")
        sys.exit(3)
    """)
    assert outcome.status == status


# Linux folds the spawner's own high-water RSS into the child's ru_maxrss at exec, so the
# kernel's figure is only a figure when above the spawner's peak: these run the supervisor
# in a fresh, small process (an engine's size), not in the test worker (torch: ~900 MB).
SPAWNER = """
import asyncio, json, os, sys
from dltop.jobs.supervisor import own_peak_rss_bytes, supervise
async def main():
    out = await supervise([sys.executable, "-c", sys.argv[1]], env=dict(os.environ),
                          log_path=sys.argv[2], timeout_s=60, on_event=lambda e: None,
                          stop=asyncio.Event())
    print(json.dumps([out.status, out.rss_peak_kernel_bytes, own_peak_rss_bytes()]))
asyncio.run(main())
"""


def spawn_small(tmp_path: Path, body: str) -> tuple[str, int | None, int]:
    res = subprocess.run([sys.executable, "-c", SPAWNER, EMIT + textwrap.dedent(body),
                          str(tmp_path / "run.log")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    status, peak, spawner = json.loads(res.stdout.strip().splitlines()[-1])
    return status, peak, spawner


def test_kernel_peak_rss_covers_a_waited_for_grandchild(tmp_path: Path) -> None:
    # The runner itself stays small; the program it waits for (as the command runner
    # waits for a command job's program) touches 200 MiB. wait4's ru_maxrss must see it:
    # a 2 Hz RSS sample can miss a grandchild that lives 0.1 s.
    status, peak, spawner = spawn_small(tmp_path, """
        import subprocess
        subprocess.run([sys.executable, "-c",
                        "b = b'x' * (200 << 20); import time; time.sleep(0.1)"], check=True)
        emit("iter", index=0, seconds=0.1, samples=1, warmup=False, loss=0.5)
        emit("done", iterations=1)
    """)
    assert status == "ok"
    assert spawner < 200 << 20, "the spawner stays smaller than what it measures"
    assert peak is not None and peak >= 200 << 20
    assert peak < 1 << 30  # KiB counted as KiB, not as bytes x 1024


def test_kernel_peak_rss_not_above_the_spawners_is_no_figure(tmp_path: Path) -> None:
    # A child smaller than its spawner: ru_maxrss is the spawner's image, not the child's.
    status, peak, spawner = spawn_small(tmp_path, 'emit("done", iterations=0)')
    assert status == "crashed" and spawner > 1 << 20  # no iterations: not ok, but reaped
    assert peak is None
