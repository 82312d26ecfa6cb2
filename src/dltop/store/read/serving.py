"""A serve run's requests (``serve_requests`` rows), their chunk times decoded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.generations import unpack_seconds
from dltop.store.read.runs import by_run
from dltop.store.read.schema import columns, has_table
from dltop.store.serving import TABLE, unpack_counts


def requests(db: Any, run_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each run's measured requests in schedule order (runs without any left out; none
    before migration 26): request, ttft_s, e2e_s, status, error, output_tokens,
    tokens_estimated, scheduled_s, dispatch_lag_s, slot_wait_s, resend_s (0 before
    migration 36), prompt_tokens, cached_tokens (NULL before migration 37), chunk_s as a
    tuple of seconds and chunk_tokens as one of counts."""
    out = by_run(db, run_ids, TABLE,
                 "select run_id, request, ttft_s, e2e_s, status, error, output_tokens, "
                 "tokens_estimated, scheduled_s, dispatch_lag_s, slot_wait_s, "
                 f"{_resend(db)} as resend_s, prompt_tokens, {_cached(db)} as cached_tokens, "
                 f"chunk_s, chunk_tokens from {TABLE} "
                 "where run_id in ({marks}) "
                 "and coalesce(warmup, 0) = 0 order by run_id, request")
    for rows in out.values():
        for r in rows:
            r["chunk_s"] = unpack_seconds(r["chunk_s"])
            r["chunk_tokens"] = unpack_counts(r["chunk_tokens"])
    return out


def _resend(db: Any) -> str:
    """A request's resend time in seconds as an SQL term: 0 where its column does not
    exist (migration 36; a read-only file of an older dltop lacks it)."""
    return "coalesce(resend_s, 0)" if "resend_s" in columns(db, TABLE) else "0"


def _cached(db: Any) -> str:
    """A request's cached prompt tokens as an SQL term: NULL where its column does not
    exist (migration 37)."""
    return "cached_tokens" if "cached_tokens" in columns(db, TABLE) else "null"


def since(db: Any, run_id: int, after_idx: int) -> list[dict[str, Any]]:
    """The run's requests that ended past ``after_idx``, in order (a live view reads
    only what is new): idx, warmup, ok (tokens and no error: :class:`dltop.results.
    serving.ServeRequest`'s), output_tokens, scheduled_s, end_s (from its phase's start),
    in_flight (NULL before migration 31) and error. No chunk arrays: a scan of them costs."""
    if not has_table(db, TABLE):
        return []
    flight = "in_flight" if "in_flight" in columns(db, TABLE) else "null as in_flight"
    return list(db.query(
        "select idx, warmup, (error is null and output_tokens >= 1 and ttft_s is not null) "
        "as ok, output_tokens, scheduled_s, scheduled_s + dispatch_lag_s + slot_wait_s + "
        f"{_resend(db)} + coalesce(e2e_s, 0) as end_s, "
        f"{flight}, error from {TABLE} "
        "where run_id = ? and idx > ? order by idx", [run_id, after_idx]))


def scheduled_at(db: Any, run_id: int, idx: int) -> float | None:
    """The scheduled time of the run's request ``idx`` (None: no such row)."""
    if not has_table(db, TABLE):
        return None
    row = db.execute(f"select scheduled_s from {TABLE} where run_id = ? and idx = ?",
                     [run_id, idx]).fetchone()
    return None if row is None else float(row[0])
