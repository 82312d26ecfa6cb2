"""``serve_requests``: one row per request of a ``mode = "serve"`` run (issue 41).

Written by :meth:`dltop.store.writer.Store.add_serve_requests` (the engine's
:mod:`dltop.jobs.serving` turns each checked ``request`` event into a row) and read
by :mod:`dltop.results.serving`. This module holds the table's name, its columns,
the packing of the per-chunk arrays and the migration that creates it (standard
library only).

A row keeps what the client saw of its request, every time in seconds: when it was
scheduled (from the start of the load, on the runner's monotonic clock), how late it
was dispatched past that, how long it waited for a concurrency slot (apart, never
hidden in TTFT), and from its send: the first byte, the first content token (TTFT),
the end (e2e), and each content chunk's arrival with its token count. The chunk
arrays are packed like a generation's latencies (:mod:`dltop.store.generations`):
doubles for the times, unsigned 32-bit integers for the counts. Failed requests are
rows too (HTTP status, error text): the error rate is counted from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.generations import pack_array, unpack_array

TABLE = "serve_requests"
COLUMNS = ("idx", "request", "warmup", "scheduled_s", "dispatch_lag_s", "slot_wait_s",
           "first_byte_s", "ttft_s", "e2e_s", "status", "error", "prompt_tokens", "output_tokens",
           "tokens_estimated", "chunk_s", "chunk_tokens", "in_flight", "resent", "resend_s",
           "cached_tokens", "max_tokens")
"""The columns a row gives (``run_id`` is the call's); ``idx`` is its event's index, the
order requests ended in, and the ``idx`` of the request's ``iterations`` and
``generations`` rows when it produced tokens; ``request`` is its place in the schedule
(warm-up requests first); ``chunk_s``/``chunk_tokens`` packed; ``in_flight`` the
client's other requests in flight when it ended (migration 31); ``resent`` the times it
was sent again (its pooled connection closed before any byte) and ``resend_s`` the
seconds from its first send to the one answered, which its times count from (migration
36; NULL before); ``cached_tokens`` the prompt tokens the server said it served from
its prefix cache (``usage.prompt_tokens_details.cached_tokens``; NULL where it did not
say) and ``max_tokens`` the ``max_tokens`` it asked (``new_tokens``, or its own draw of
``new_tokens_spread``), both migration 37."""
RUN_COLUMNS = {"serve_window_s": float, "client_cpu_pct": float, "dispatch_lag_p99_s": float,
               "client_bound": int}
"""``runs`` columns of a serve run: the measured load's wall seconds, the client's CPU
over it (100 = one core), the p99 of its measured requests' dispatch lag, and whether
the client could not keep the schedule (``client-bound``)."""


def pack_counts(values: Sequence[int]) -> bytes:
    """Token counts as little-endian unsigned 32-bit integers."""
    return pack_array("I", values)


def unpack_counts(blob: bytes | None) -> tuple[int, ...]:
    """The inverse of :func:`pack_counts` (empty for NULL)."""
    return unpack_array("I", blob)


def v26(db: Any) -> None:
    """Migration 26: the ``serve_requests`` table and the serve columns of ``runs``."""
    # Keyed by (run_id, idx) WITHOUT ROWID like generations; its chunk arrays packed.
    db.conn.execute(
        f"create table {TABLE} (run_id integer not null references runs(id), "
        "idx integer not null, request integer, warmup integer, scheduled_s float, "
        "dispatch_lag_s float, slot_wait_s float, first_byte_s float, ttft_s float, "
        "e2e_s float, status integer, "
        "error text, prompt_tokens integer, output_tokens integer, tokens_estimated integer, "
        "chunk_s blob, chunk_tokens blob, primary key (run_id, idx)) without rowid")
    for name, kind in RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


SERVER_COLUMNS = {"server_cold_start_s": float}
"""The run's column for a server dltop started (issue 41 item 5): from its start to the
first answer of its readiness URL, in s (None: no server started by dltop)."""


def v28(db: Any) -> None:
    """Migration 28: ``runs.server_cold_start_s`` (a started server's cold start)."""
    for name, kind in SERVER_COLUMNS.items():
        db["runs"].add_column(name, kind)


TOKEN_COLUMNS = {"token_source": str}
"""The run's column naming what counted its measured requests' output tokens (issue 41
item 3): ``usage``, ``tokenize``, ``tokenizer`` or ``estimated``, joined by ``+`` when
they differed between requests (None: no measured request produced tokens)."""


def v29(db: Any) -> None:
    """Migration 29: ``runs.token_source`` (what counted a serve run's output tokens)."""
    for name, kind in TOKEN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def v31(db: Any) -> None:
    """Migration 31: ``serve_requests.in_flight`` (what a live view shows in flight)."""
    db[TABLE].add_column("in_flight", int)


IDLE_COLUMNS = {"idle_power_w": float, "idle_window_s": float, "idle_readings": int,
                "cpu_idle_power_w": float}
"""The run's idle power (issue 41 item 4): its GPUs' mean power, summed over them, while
its runner waited with nothing sent just before the load; that wait in s; the GPU
readings inside it (the fewest of the GPUs': the count the figure stands on); the host's
CPU power over it from RAPL (packages and DRAM; NULL without RAPL)."""


def v33(db: Any) -> None:
    """Migration 33: ``runs.idle_power_w/idle_window_s/idle_readings/cpu_idle_power_w``."""
    for name, kind in IDLE_COLUMNS.items():
        db["runs"].add_column(name, kind)


FORCE_COLUMNS = {"length_forced": int, "short_requests": int}
"""Whether a serve run's requests carried fields forcing their output to ``new_tokens``
(``force_length``: ``ignore_eos``, ``min_tokens``; issue 41 item 3), and how many of its
ok measured requests came back shorter than ``new_tokens`` all the same."""


def v34(db: Any) -> None:
    """Migration 34: ``runs.length_forced/short_requests``."""
    for name, kind in FORCE_COLUMNS.items():
        db["runs"].add_column(name, kind)


def v36(db: Any) -> None:
    """Migration 36: ``serve_requests.resent/resend_s`` (a request sent again)."""
    db[TABLE].add_column("resent", int)
    db[TABLE].add_column("resend_s", float)


def v37(db: Any) -> None:
    """Migration 37: ``serve_requests.cached_tokens/max_tokens``."""
    db[TABLE].add_column("cached_tokens", int)
    db[TABLE].add_column("max_tokens", int)
