"""The terminal driver's input thread: asleep until a key comes, awake at the stop.

A real pseudo-terminal in raw mode stands in for the user's terminal; the thread is
``QuietLinuxDriver.run_input_thread`` itself, the events are what it dispatches.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import threading
import time
import tty
from collections.abc import Iterator

import pytest
from textual import events
from textual.app import App
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

from dltop.tui.driver import QuietLinuxDriver, WakingEvent, quiet_driver


class Recording(QuietLinuxDriver):
    def __init__(self, app: App[object]) -> None:
        super().__init__(app)
        self.got: list[Message] = []

    def process_message(self, message: Message) -> None:
        self.got.append(message)

    def keys(self) -> list[str]:
        return [m.key for m in self.got if isinstance(m, events.Key)]


@pytest.fixture
def driver() -> Iterator[tuple[Recording, int]]:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    master, slave = pty.openpty()
    tty.setraw(slave)
    async def make() -> Recording:  # a driver is made inside a running event loop
        return Recording(App())

    drv = asyncio.run(make())
    drv.fileno = slave
    try:
        yield drv, master
    finally:
        drv.exit_event.set()
        drv.close()
        os.close(master)
        os.close(slave)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _wait(cond: object, timeout_s: float = 3.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_the_input_thread_waits_for_input_not_a_clock(driver: tuple[Recording, int]) -> None:
    drv, master = driver
    thread = threading.Thread(target=drv.run_input_thread, daemon=True)
    thread.start()
    time.sleep(0.6)
    # Textual's own thread would have waited 6 times by now (0.1 s timeouts)
    assert drv.input_waits <= 1
    os.write(master, b"j")
    assert _wait(lambda: drv.keys() == ["j"])
    # A lone Escape is held by the parser until its deadline, then given as the key:
    # the thread must wake for that deadline although nothing more arrives.
    os.write(master, b"\x1b")
    assert _wait(lambda: drv.keys() == ["j", "escape"])
    waits = drv.input_waits
    time.sleep(0.5)
    assert drv.input_waits == waits  # asleep again
    t0 = time.monotonic()
    drv.exit_event.set()
    thread.join(timeout=2)
    assert not thread.is_alive()
    assert time.monotonic() - t0 < 0.5  # woken by the stop, not by a timeout


def test_clearing_the_event_drains_its_pipe() -> None:
    event = WakingEvent()
    try:
        assert select.select([event.fd], [], [], 0)[0] == []
        event.set()
        event.set()  # twice: still one wake-up to drain
        assert select.select([event.fd], [], [], 0)[0] == [event.fd]
        assert event.is_set()
        event.clear()
        assert not event.is_set()
        assert select.select([event.fd], [], [], 0)[0] == []
    finally:
        event.close()
    event.set()  # after close: a plain event, no write to a descriptor that may be reused
    assert event.is_set()


def test_only_the_plain_linux_driver_is_replaced() -> None:
    assert quiet_driver(LinuxDriver) is QuietLinuxDriver
    assert quiet_driver(HeadlessDriver) is HeadlessDriver
