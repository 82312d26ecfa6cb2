"""``run_archive``: what exports need of a pruned run's raw rows, and its codec.

A table of its own (migration 12) written by :mod:`dltop.store.retention` and
read by :mod:`dltop.results.aggregate` and :mod:`dltop.results.export`; this
module holds only the name and the packing both sides share (standard library; the
doubles packed as a generation's latencies, :func:`dltop.store.generations.pack_array`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

from dltop.store.generations import pack_array, unpack_array

ARCHIVE = "run_archive"
"""One row per pruned run: its measured iterations (packed), ``tree_cpu_all_pct``
(mean process-tree CPU over every host sample), ``gpu_simulated``, and the raw rows
deleted per table."""


def pack_measured(rows: Sequence[tuple[float, int]]) -> tuple[bytes, bytes]:
    """(seconds, samples) of measured iterations as two compressed blobs.

    Seconds are IEEE doubles (little-endian), exactly as SQLite stored them;
    samples are JSON integers (any size), which compress to almost nothing when
    every step has the same batch.
    """
    return (zlib.compress(pack_array("d", [s for s, _ in rows])),
            zlib.compress(json.dumps([n for _, n in rows], separators=(",", ":")).encode()))


def unpack_measured(seconds_blob: bytes, samples_blob: bytes) -> list[tuple[float, int]]:
    """The inverse of :func:`pack_measured`."""
    samples = json.loads(zlib.decompress(samples_blob))
    return list(zip(unpack_array("d", zlib.decompress(seconds_blob)), (int(n) for n in samples),
                    strict=True))
