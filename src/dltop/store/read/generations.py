"""A generate run's requests (``generations`` rows), their latencies decoded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.generations import TABLE, unpack_seconds
from dltop.store.read.runs import by_run
from dltop.store.read.schema import has_table


def requests(db: Any, run_ids: Sequence[int], *,
             warmup: bool = False) -> dict[int, list[dict[str, Any]]]:
    """Each run's requests in order, measured ones only unless ``warmup`` (runs without
    any left out; none before migration 17): idx, warmup, ttft_s, e2e_s, prompt_tokens,
    new_tokens, batch, and itl_s as a tuple of seconds."""
    where = "" if warmup else " and coalesce(warmup, 0) = 0"
    out = by_run(db, run_ids, TABLE,
                 "select run_id, idx, warmup, ttft_s, e2e_s, prompt_tokens, new_tokens, batch, "
                 f"itl_s from {TABLE} where run_id in ({{marks}}){where} order by run_id, idx")
    for rows in out.values():
        for r in rows:
            r["itl_s"] = unpack_seconds(r["itl_s"])
    return out


def measured_since(db: Any, run_id: int, after_idx: int) -> list[dict[str, Any]]:
    """The run's measured requests past ``after_idx``, in order: idx, ttft_s and itl_s
    decoded (none before migration 17)."""
    if not has_table(db, TABLE):
        return []
    rows = list(db.query(f"select idx, ttft_s, itl_s from {TABLE} where run_id = ? "
                         "and idx > ? and coalesce(warmup, 0) = 0 order by idx",
                         [run_id, after_idx]))
    for r in rows:
        r["itl_s"] = unpack_seconds(r["itl_s"])
    return rows

