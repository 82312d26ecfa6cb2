"""``generations``: one row per generation request of a ``mode = "generate"`` run.

Written by :meth:`dltop.store.writer.Store.add_generations` (the engine's
:mod:`dltop.jobs.evals` pairs each checked ``generate`` event with its ``iter``) and
read by :mod:`dltop.results.generation`. This module holds the table's name, its
columns and the packing of the inter-token latencies both sides share (standard
library only).

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

TABLE = "generations"
COLUMNS = ("idx", "warmup", "ttft_s", "e2e_s", "prompt_tokens", "new_tokens", "batch",
           "itl_s")
"""The columns a row gives (``run_id`` is the call's). ``e2e_s`` is the request's
``iter`` seconds (NULL when the runner died between the two events); ``itl_s`` is
:func:`pack_seconds` of the ``new_tokens - 1`` latencies."""


def pack_seconds(values: Sequence[float]) -> bytes:
    """Seconds as little-endian IEEE doubles (exactly the floats given)."""
    packed = array("d", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def unpack_seconds(blob: bytes | None) -> tuple[float, ...]:
    """The inverse of :func:`pack_seconds` (empty for NULL)."""
    if not blob:
        return ()
    values = array("d")
    values.frombytes(blob)
    if sys.byteorder == "big":
        values.byteswap()
    return tuple(values.tolist())
