"""SignalCatcher: the lock-free signal path of ``dltop agent`` and ``dltop serve``."""

from __future__ import annotations

import os
import signal
import threading
import time

from dltop.procs import SignalCatcher


def test_the_first_signal_is_kept_and_the_old_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with SignalCatcher().installed((signal.SIGUSR1, signal.SIGUSR2)) as caught:
        assert caught.wait(0.05) == ""  # nothing yet: the timeout ends the wait
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert caught.wait(5) == "SIGUSR2"
    assert signal.getsignal(signal.SIGUSR1) is before


def test_a_signal_while_the_main_thread_holds_an_event_lock_is_still_seen() -> None:
    # The deadlock it replaces: an Event.set() in a handler that runs while this
    # thread is inside the same Event's wait, holding its lock.
    stop = threading.Event()
    with SignalCatcher().installed((signal.SIGUSR1,)) as caught:
        with stop._cond:  # the lock a handler must never need
            os.kill(os.getpid(), signal.SIGUSR1)
            t0 = time.monotonic()
            while not caught.name and time.monotonic() - t0 < 5:
                pass
        assert caught.name == "SIGUSR1"
