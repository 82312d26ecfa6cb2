"""``generations``: one row per generation request of a ``mode = "generate"`` run.

Written by :meth:`dltop.store.writer.Store.add_generations` (the engine's
:mod:`dltop.jobs.evals` pairs each checked ``generate`` event with its ``iter``) and
read by :mod:`dltop.results.generation`. This module holds the table's name, its
columns, the packing of the inter-token latencies both sides share (standard
library only) and migration 27.

The latencies of a request are one BLOB of little-endian IEEE doubles, not a JSON
array: 8 bytes per token against ~19 for JSON's shortest round-trip text, the very
values the runner measured (JSON's text would round-trip too, but costs a parse per
number), and decoded in one C call (:meth:`array.array.frombytes`). A run of 100
requests of 1024 tokens is 800 KiB this way. They are not compressed: timings'
low bits are noise and do not compress. One row per request, never per token: ITL
percentiles need every latency, and a row per token would be the largest table of a
generation campaign.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

TABLE = "generations"
COLUMNS = ("idx", "warmup", "ttft_s", "e2e_s", "prompt_tokens", "new_tokens", "batch",
           "itl_s", "distinct_tokens")
"""The columns a row gives (``run_id`` is the call's). ``e2e_s`` is the request's
``iter`` seconds (NULL when the runner died between the two events); ``itl_s`` is
:func:`pack_seconds` of the ``new_tokens - 1`` latencies; ``distinct_tokens`` the sum
over its sequences of each one's distinct generated ids (NULL: not counted, or a row
stored before migration 27)."""
DISTINCT_COLUMN = "distinct_token_frac"
"""``runs`` column of a generate run: Σ distinct_tokens / Σ batch × new_tokens over its
measured requests that counted them, the mean over the sequences of each one's distinct
ids / its new tokens (per sequence, not pooled: the requests repeat one prompt, so a
pooled count would fall with their number)."""


def pack_array(code: str, values: Sequence[float] | Sequence[int]) -> bytes:
    """``values`` as a little-endian :mod:`array` of type ``code`` (``d``: IEEE doubles,
    exactly the floats given; ``I``: unsigned 32-bit integers), whatever the host's order."""
    packed = array(code, values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_array(code: str, blob: bytes | None) -> tuple[Any, ...]:
    """The inverse of :func:`pack_array` (empty for NULL)."""
    if not blob:
        return ()
    values = array(code)
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return tuple(values.tolist())


def pack_seconds(values: Sequence[float]) -> bytes:
    """Seconds as little-endian IEEE doubles (exactly the floats given)."""
    return pack_array("d", values)


def unpack_seconds(blob: bytes | None) -> tuple[float, ...]:
    """The inverse of :func:`pack_seconds` (empty for NULL)."""
    return unpack_array("d", blob)


def v27(db: Any) -> None:
    """Migration 27 (issue 42): what a generate run's tokens were, beside how fast they came.

    ``generations.distinct_tokens``: per request, the sum over its sequences of each one's
    distinct generated ids (the runner counts them after the request's time is taken);
    ``runs.distinct_token_frac``: the run's fraction over its measured requests
    (:data:`DISTINCT_COLUMN`). A greedy decoder that repeats one token reads
    1 / new_tokens; one that never repeats, 1.0. Rows stored before keep NULL.
    """
    db.conn.execute(f"alter table {TABLE} add column distinct_tokens integer")
    db["runs"].add_column(DISTINCT_COLUMN, float)
