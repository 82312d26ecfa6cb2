"""A Linux terminal driver whose input thread sleeps until there is input.

Textual's ``LinuxDriver`` waits for keys in ``select`` with a 0.1 s timeout, so that
its parser can give up on a lone Escape after a short wait: ten wake-ups a second,
whatever happens. Measured inside ``dltop tui --no-telemetry`` in tmux (per-thread CPU
from ``/proc``), that thread was the viewer's whole idle cost (0.0018 CPU-s/s, more
than half of what htop costs at its default refresh). :class:`QuietLinuxDriver` waits
with no timeout unless the parser is waiting for the rest of an escape sequence (then
exactly until the parser's own deadline), and is woken by a pipe when the driver
stops, so stopping is as quick as before.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._parser import ParseError, Parser
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

FALLBACK_TIMEOUT_S = 0.1
"""The wait used when the parser does not say when it gives up (Textual's own)."""


class WakingEvent(threading.Event):
    """A ``threading.Event`` that can also be waited on in ``select``: setting it makes
    :attr:`fd` readable; clearing it drains the pipe again."""

    def __init__(self) -> None:
        super().__init__()
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)
        self._closed = False

    def set(self) -> None:
        super().set()
        if not self._closed:  # a closed descriptor's number may belong to another file
            with contextlib.suppress(BlockingIOError):  # full: it is readable already
                os.write(self._write_fd, b"\0")

    def clear(self) -> None:
        super().clear()
        if not self._closed:
            try:
                while os.read(self.fd, 512):
                    pass
            except BlockingIOError:  # drained
                pass

    def close(self) -> None:
        """Close the pipe (the event still works as a plain event)."""
        if not self._closed:
            self._closed = True
            os.close(self.fd)
            os.close(self._write_fd)


def input_timeout_s(parser: Parser[Any], now_s: float) -> float | None:
    """How long the input thread may wait for input: None (until input or stop) unless
    the parser holds part of an escape sequence, then until its deadline."""
    if not hasattr(parser, "_timeout_time"):  # another Textual: its own wait
        return FALLBACK_TIMEOUT_S
    deadline: float | None = parser._timeout_time
    return None if deadline is None else max(0.0, deadline - now_s)


class QuietLinuxDriver(LinuxDriver):
    """``LinuxDriver`` with an input thread that does not wake ten times a second."""

    def __init__(self, app: App[object], *, debug: bool = False, mouse: bool = True,
                 size: tuple[int, int] | None = None) -> None:
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self.exit_event = WakingEvent()
        self.input_waits = 0
        """``select`` calls made by the input thread (tests: it must not poll)."""

    def run_input_thread(self) -> None:
        """Wait for input (or the stop) and dispatch the events it parses into."""
        exit_event = self.exit_event
        assert isinstance(exit_event, WakingEvent)
        fileno = self.fileno
        selector = selectors.SelectSelector()  # as Textual: epoll refuses some ttys
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(exit_event.fd, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def dispatch(timeout: float | None, final: bool = False) -> None:
            self.input_waits += 1
            ready = [mask for key, mask in selector.select(timeout) if key.fd == fileno]
            if ready and ready[-1] & selectors.EVENT_READ:
                data = decode(os.read(fileno, 1024 * 4), final=final)
                if data:
                    for event in parser.feed(data):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            while not exit_event.is_set():
                dispatch(input_timeout_s(parser, get_time()))
            # what arrived with the stop (Textual reads it too)
            dispatch(0.0, final=True)
        finally:
            selector.close()
            try:
                for _event in parser.feed(""):
                    pass
            except (EOFError, ParseError):  # end of input: a half sequence is dropped
                pass

    def close(self) -> None:
        super().close()
        if isinstance(self.exit_event, WakingEvent):
            self.exit_event.close()


def quiet_driver(chosen: type[Driver]) -> type[Driver]:
    """:class:`QuietLinuxDriver` where Textual chose its plain ``LinuxDriver`` (a terminal
    on Linux); any other driver (headless tests, the browser's) as chosen."""
    return QuietLinuxDriver if chosen is LinuxDriver else chosen
