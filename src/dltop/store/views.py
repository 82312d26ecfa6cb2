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

JOB_SPECS = "job_specs"
"""View: every job's ``job_id``, ``campaign_id``, ``config_key`` and ``spec_json``, the
row's own or its template's with the job's ``repeat`` (:mod:`dltop.store.templates`)."""

VIEWS: dict[str, str] = {
    LATEST_RUNS: "select * from runs r "
                 "where r.id = (select max(id) from runs where job_id = r.job_id)",
    # json_set replaces ``repeat`` in place (the key order is kept, the JSON compact);
    # a job row stored whole (before migration 23) is its own spec
    JOB_SPECS: "select j.id as job_id, j.campaign_id, "
               "coalesce(j.config_key, t.config_key) as config_key, "
               "coalesce(j.spec_json, json_set(t.spec_json, '$.repeat', j.repeat)) "
               "as spec_json from jobs j left join job_templates t "
               "on t.campaign_id = j.campaign_id and t.n = j.template",
}
"""View name -> its ``select``. ``select *`` follows the columns later migrations add
(SQLite expands it when it reads the schema, not when the view is created)."""

_BEFORE_TEMPLATES = {JOB_SPECS: "select id as job_id, campaign_id, config_key, spec_json "
                                "from jobs"}
"""A database before migration 23 (no ``job_templates``): each job row is whole."""

_BEFORE_CONFIGS = ("select campaign_id, config_key, count(*) as jobs, min(position) as "
                   "first_position, framework, model, batch_size, device, precision, spec_json "
                   "from jobs where config_key is not null group by campaign_id, config_key")
"""``job_configs`` of a database before migration 20, grouped at each read (what migration
20 stores: the bare columns are the row of the group's first position)."""


def create_views(db: Any, names: list[str]) -> None:
    """Create these views of :data:`VIEWS` in the main database (migrations 21, 23)."""
    for name in names:
        db.execute(f"create view if not exists {name} as {VIEWS[name]}")


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
    old = conn.execute("select 1 from sqlite_master where type = 'table' "
                       "and name = 'job_templates'").fetchone() is None
    for name in missing:
        select = _BEFORE_TEMPLATES.get(name, VIEWS[name]) if old else VIEWS[name]
        conn.execute(f"create temp view {name} as {select}")
    if conn.execute("select 1 from sqlite_master where name = 'job_configs'").fetchone() is None:
        # readers count the jobs never run from it; a write open stores it (migration 20)
        conn.execute(f"create temp view if not exists job_configs as {_BEFORE_CONFIGS}")
        missing.append("job_configs")
    return missing
