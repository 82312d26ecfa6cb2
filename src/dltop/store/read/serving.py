"""A serve run's requests (``serve_requests`` rows), their chunk times decoded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.generations import unpack_seconds
from dltop.store.read.runs import in_chunks
from dltop.store.read.schema import has_table
from dltop.store.serving import TABLE, unpack_counts


def requests(db: Any, run_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each run's measured requests in schedule order (runs without any left out; none
    before migration 26): request, ttft_s, e2e_s, status, error, output_tokens,
    tokens_estimated, scheduled_s, dispatch_lag_s, slot_wait_s, chunk_s as a tuple of
    seconds and chunk_tokens as one of counts."""
    out: dict[int, list[dict[str, Any]]] = {}
    if not run_ids or not has_table(db, TABLE):
        return out
    for chunk, marks in in_chunks(run_ids):
        for r in db.query(
                "select run_id, request, ttft_s, e2e_s, status, error, output_tokens, "
                "tokens_estimated, scheduled_s, dispatch_lag_s, slot_wait_s, chunk_s, chunk_tokens "
                f"from {TABLE} where run_id in ({marks}) and coalesce(warmup, 0) = 0 "
                "order by run_id, request", chunk):
            r["chunk_s"] = unpack_seconds(r["chunk_s"])
            r["chunk_tokens"] = unpack_counts(r["chunk_tokens"])
            out.setdefault(int(r["run_id"]), []).append(r)
    return out
