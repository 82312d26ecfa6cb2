"""Views the readers share: a question the schema answers the same way everywhere.

``latest_runs`` is every job's latest attempt (its run with the highest id): the
results, the report, the captions and the live viewer used to write that subquery
each in its own words. Migration 21 creates the views in the database; a read-only
connection to a database an older dltop wrote, which cannot be migrated, gets them
as temporary views (:func:`ensure_views`), so the readers' SQL is the same for both.

The view is written as a correlated condition on each run, not as ``id in (select
max(id) ... group by job_id)``: SQLite flattens it into the outer query, so a read
by campaign still searches the runs' campaign index and a join from a job its
``job_id`` index, each row checked by one search of the ``job_id`` index
(tests/store/test_query_plans.py holds every reader to an index).
"""

from __future__ import annotations

from typing import Any

LATEST_RUNS = "latest_runs"
"""View: the latest run (highest id) of each job that has a run; every ``runs`` column."""

VIEWS: dict[str, str] = {
    LATEST_RUNS: "select * from runs r "
                 "where r.id = (select max(id) from runs where job_id = r.job_id)",
}
"""View name -> its ``select``. ``select *`` follows the columns later migrations add
(SQLite expands it when it reads the schema, not when the view is created)."""


def create_views(db: Any) -> None:
    """Create every view of :data:`VIEWS` in the main database (migration 21)."""
    for name, select in VIEWS.items():
        db.execute(f"create view if not exists {name} as {select}")


def ensure_views(conn: Any) -> list[str]:
    """Create, as temporary views, the views an older database lacks; return their names.

    For a connection that cannot migrate its database (read-only): call it before
    ``PRAGMA query_only``, which refuses even temporary schema.
    """
    have = {r[0] for r in conn.execute(
        "select name from sqlite_master where type = 'view' "
        "union all select name from sqlite_temp_master where type = 'view'")}
    missing = [name for name in VIEWS if name not in have]
    # an old database without runs (none before migration 1) has nothing to view
    if missing and conn.execute("select 1 from sqlite_master where type = 'table' "
                                "and name = 'runs'").fetchone() is None:
        return []
    for name in missing:
        conn.execute(f"create temp view {name} as {VIEWS[name]}")
    return missing
