"""A serve run's requests (``serve_requests`` rows), their chunk times decoded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.generations import unpack_seconds
from dltop.store.read.runs import in_chunks
from dltop.store.read.schema import columns, has_table
from dltop.store.serving import TABLE


def requests(db: Any, run_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each run's measured requests in schedule order (runs without any left out; none
    before migration 26): request, ttft_s, e2e_s, status, error, output_tokens,
    tokens_estimated, dispatch_lag_s, slot_wait_s, and chunk_s as a tuple of seconds."""
    out: dict[int, list[dict[str, Any]]] = {}
    if not run_ids or not has_table(db, TABLE):
        return out
    for chunk, marks in in_chunks(run_ids):
        for r in db.query(
                "select run_id, request, ttft_s, e2e_s, status, error, output_tokens, "
                "tokens_estimated, dispatch_lag_s, slot_wait_s, chunk_s "
                f"from {TABLE} where run_id in ({marks}) and coalesce(warmup, 0) = 0 "
                "order by run_id, request", chunk):
            r["chunk_s"] = unpack_seconds(r["chunk_s"])
            out.setdefault(int(r["run_id"]), []).append(r)
    return out


_OK = "(error is null and output_tokens >= 1 and ttft_s is not null)"
"""A request that ended without an error, with tokens (:class:`dltop.results.serving.
ServeRequest`'s ``ok``)."""


def so_far(db: Any, run_id: int) -> dict[str, Any] | None:
    """A running serve run's requests stored so far, summed (None: none yet): ``warmup``
    (warm-up requests ended), ``ok`` and ``failed`` (measured ones), ``tokens`` (the ok
    ones' output tokens), ``window_s`` (from the measured load's start to the last end
    of a measured request), and of the newest request to end, ``in_flight`` (the
    client's requests still in flight then; NULL before migration 29) and the newest
    ``error``."""
    if not has_table(db, TABLE):
        return None
    end = "scheduled_s + dispatch_lag_s + slot_wait_s + coalesce(e2e_s, 0)"
    row = next(db.query(
        f"select count(*) as n, sum(warmup) as warmup, sum(not warmup and {_OK}) as ok, "
        f"sum(not warmup and not {_OK}) as failed, "
        f"sum(case when not warmup and {_OK} then output_tokens end) as tokens, "
        f"max(case when not warmup then {end} end) as window_s "
        f"from {TABLE} where run_id = ?", [run_id]))
    if not row["n"]:
        return None
    flight = "in_flight" if "in_flight" in columns(db, TABLE) else "null"
    newest = next(db.query(f"select {flight} as in_flight from {TABLE} where run_id = ? "
                           "order by idx desc limit 1", [run_id]))
    error = next(db.query(f"select error from {TABLE} where run_id = ? and error is not null "
                          "order by idx desc limit 1", [run_id]), None)
    return {**row, "in_flight": newest["in_flight"], "error": error and error["error"]}
