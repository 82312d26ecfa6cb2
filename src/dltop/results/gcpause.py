"""The cyclic garbage collector paused while a large results table is built.

A summary of 10 000 configurations allocates some two million objects that live
until the table is drawn (cells, rows, run records, identities) and no reference
cycles; the collector's full passes scanned them all, again and again as they grew:
a third of the time the rows took (issue 32). Reference counting still frees
everything the build drops; cycles made meanwhile (by this thread or another) wait
for the first collection after it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause automatic collections inside the block (nested or from several threads:
    until the last one leaves), then restore the state found on entering the first."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
