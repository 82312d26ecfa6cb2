"""Migration 27 (issue 42): what a generate run's tokens were, beside how fast they came.

``generations.distinct_tokens``: per request, the sum over its sequences of each one's
distinct generated ids (the runner counts them after the request's time is taken);
``runs.distinct_token_frac``: the run's fraction over its measured requests
(:data:`dltop.store.generations.DISTINCT_COLUMN`). A greedy decoder that repeats one
token reads 1 / new_tokens; one that never repeats, 1.0. Rows stored before keep NULL.
"""

from __future__ import annotations

from typing import Any

from dltop.store.generations import DISTINCT_COLUMN, TABLE


def v27(db: Any) -> None:
    db.conn.execute(f"alter table {TABLE} add column distinct_tokens integer")
    db["runs"].add_column(DISTINCT_COLUMN, float)
