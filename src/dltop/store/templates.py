"""A campaign's job specs stored once per configuration (migration 23, issue 32).

A profile repeated 100 000 times is a few configurations, each a ~1.3 kB spec and a
~560-byte ``config_key``; stored in every ``jobs`` row they made a 210 MB database
whose writing delayed the first run by seconds. Now each distinct spec of a
campaign (every field but ``repeat``) is one ``job_templates`` row, numbered
``n`` within its campaign, and a job row holds what differs: its position, status,
``repeat`` and ``template`` (that ``n``), beside the few identity columns the
queue and the viewers filter on. ``spec_json`` and ``config_key`` are NULL in such
a row.

Readers never rebuild a spec themselves: the ``job_specs`` view
(:mod:`dltop.store.views`) gives every job's ``config_key`` and ``spec_json``, a
row's own for jobs stored before (or by a test that inserts full rows), else the
template's with the job's ``repeat`` put back. ``job_configs`` (migration 20, one
row per ``config_key`` with its job count) stays what results read; for template
rows its count is kept by :func:`add_templates`' caller (one statement per
configuration, not a trigger per job) and by a delete trigger.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from dltop.errors import UserError
from dltop.profiles.jobspec import JobSpec
from dltop.store.read.runs import marks

TEMPLATES = "job_templates"
"""Table: one row per distinct job spec (less ``repeat``) of a campaign."""

CONFIG_COLUMNS = ("framework", "model", "batch_size", "device", "precision")
"""``job_configs``' copy of the configuration's identity columns (beside its spec)."""


def v23(db: Any) -> None:
    """Migration 23: ``job_templates``, ``jobs.template``, the ``job_specs`` view."""
    from dltop.store.views import JOB_SPECS, create_views

    db.conn.execute(
        f"create table {TEMPLATES} (campaign_id integer not null, n integer not null, "
        "config_key text not null, spec_json text not null, "
        "primary key (campaign_id, n)) without rowid")
    db.conn.execute("alter table jobs add column template integer")
    # job_configs' count for template rows: the writer adds a configuration's jobs in
    # one statement; a deleted job (retention deletes a campaign's) counts itself out.
    db.conn.execute(
        "create trigger job_configs_delete_template after delete on jobs "
        "when old.config_key is null and old.template is not null begin "
        "update job_configs set jobs = jobs - 1 where campaign_id = old.campaign_id "
        f"and config_key = (select config_key from {TEMPLATES} "
        "where campaign_id = old.campaign_id and n = old.template); "
        "delete from job_configs where campaign_id = old.campaign_id and jobs <= 0; end")
    # dltop never moves a job or changes its key; SQL that does counts a template row out
    # of its configuration (the insert side is migration 20's update trigger for a row
    # given a key, this one's for a row given another template)
    of_template = (f"(select config_key from {TEMPLATES} where campaign_id = {{0}}.campaign_id "
                   "and n = {0}.template)")
    db.conn.execute(
        "create trigger job_configs_update_template after update of campaign_id, config_key, "
        "template on jobs begin "
        "update job_configs set jobs = jobs - 1 where old.config_key is null "
        f"and campaign_id = old.campaign_id and config_key = {of_template.format('old')}; "
        "delete from job_configs where campaign_id = old.campaign_id and jobs <= 0; "
        "insert into job_configs (campaign_id, config_key, jobs, first_position, framework, "
        "model, batch_size, device, precision, spec_json) "
        f"select new.campaign_id, t.config_key, 1, new.position, new.framework, new.model, "
        f"new.batch_size, new.device, new.precision, t.spec_json from {TEMPLATES} t "
        "where new.config_key is null and t.campaign_id = new.campaign_id and t.n = new.template "
        "on conflict (campaign_id, config_key) do update set jobs = jobs + 1; end")
    create_views(db, [JOB_SPECS])


def v32(db: Any) -> None:
    """Migration 32: every job counted in ``job_configs``, which results alone read: one
    without a ``config_key`` (migration 20 counted none such) gets its spec's, as in
    migration 7, and a campaign whose configurations miss jobs is counted again."""
    keys = []
    for job_id, spec_json in db.conn.execute(
            "select id, spec_json from jobs where config_key is null and template is null"):
        try:
            keys.append((JobSpec.from_json_dict(json.loads(spec_json)).config_key, job_id))
        except (KeyError, TypeError, ValueError):
            continue  # an unreadable spec stays uncounted rather than failing the open
    db.conn.executemany("update jobs set config_key = ? where id = ?", keys)  # triggers count
    cols = ", ".join(CONFIG_COLUMNS)
    for (cid,) in db.conn.execute(
            "select c.id from campaigns c where (select count(*) from jobs where campaign_id "
            "= c.id) != (select coalesce(sum(jobs), 0) from job_configs where campaign_id "
            "= c.id)").fetchall():
        db.conn.execute("delete from job_configs where campaign_id = ?", [cid])
        db.conn.execute(
            f"insert into job_configs (campaign_id, config_key, jobs, first_position, {cols}, "
            f"spec_json) select j.campaign_id, s.config_key, count(*), min(j.position), "
            f"{', '.join(f'j.{c}' for c in CONFIG_COLUMNS)}, s.spec_json from jobs j "
            "join job_specs s on s.job_id = j.id where j.campaign_id = ? "
            "and s.config_key is not null group by s.config_key", [cid])


def spec_without_repeat(spec: dict[str, Any]) -> str:
    """The template key of a spec: its JSON less ``repeat`` (what repeats share)."""
    return json.dumps({k: v for k, v in spec.items() if k != "repeat"}, sort_keys=True)


def add_templates(db: Any, campaign_id: int,
                  specs: Iterable[tuple[str, str, dict[str, Any]]]) -> dict[str, int]:
    """Store the templates a campaign lacks; return template key -> ``n``.

    Args:
        specs: (template key, config_key, spec dict) of each configuration to store;
            a key the campaign already has keeps its ``n``. The caller holds the
            transaction.
    """
    have: dict[str, int] = {}
    top = 0
    for n, spec_json in db.conn.execute(
            f"select n, spec_json from {TEMPLATES} where campaign_id = ?", [campaign_id]):
        have[spec_without_repeat(json.loads(spec_json))] = int(n)
        top = max(top, int(n))
    new = []
    for tkey, config_key, spec in specs:
        if tkey in have:
            continue
        top += 1
        have[tkey] = top
        new.append((campaign_id, top, config_key, json.dumps(spec)))
    db.conn.executemany(f"insert into {TEMPLATES} (campaign_id, n, config_key, spec_json) "
                        "values (?, ?, ?, ?)", new)
    return have


def count_configs(db: Any, campaign_id: int,
                  counts: Iterable[tuple[str, dict[str, Any], str, int, int]]) -> None:
    """Add jobs to ``job_configs`` (what its insert trigger does for full rows).

    Args:
        counts: (config_key, the job row's :data:`CONFIG_COLUMNS`, a job's spec JSON,
            jobs added, first position among them) per configuration. The caller
            holds the transaction.
    """
    cols = ", ".join(CONFIG_COLUMNS)
    db.conn.executemany(
        f"insert into job_configs (campaign_id, config_key, jobs, first_position, {cols}, "
        f"spec_json) values (?, ?, ?, ?, {marks(CONFIG_COLUMNS)}, ?) "
        "on conflict (campaign_id, config_key) do update set jobs = jobs + excluded.jobs, "
        "first_position = min(coalesce(first_position, excluded.first_position), "
        "coalesce(excluded.first_position, first_position))",
        [(campaign_id, key, jobs, first, *(columns[c] for c in CONFIG_COLUMNS), spec)
         for key, columns, spec, jobs, first in counts])


def read_back(db: Any, ids: range, compact: bool) -> None:
    """Decode one stored spec of each configuration among the jobs ``ids`` as the engine
    and ``--resume`` read it (the ``job_specs`` view, ``JobSpec.from_json_dict``).

    A spec that does not read back (a NaN the loader let through is JSON that SQLite's
    ``json_set`` calls malformed) would fail every run and every ``--resume`` of its
    campaign; the caller's transaction is rolled back instead.

    Args:
        ids: the job ids just inserted (consecutive).
        compact: the jobs table has ``template`` (migration 23): one spec per template
            is read through the view; else one row's own per ``config_key``.

    Raises:
        UserError: a spec does not read back: nothing of the caller's transaction is kept.
    """
    if not ids:
        return
    # a database before migration 23 has no view (and may have none yet): its rows are whole
    source, key, group = (("job_specs", "job_id", "coalesce(template, config_key)") if compact
                          else ("jobs", "id", "config_key"))
    try:
        for (spec_json,) in db.conn.execute(
                f"select spec_json from {source} where {key} in (select min(id) from jobs "
                f"where id between ? and ? group by {group})", [ids[0], ids[-1]]):
            JobSpec.from_json_dict(json.loads(spec_json))
    except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"a job spec does not read back as it was stored ({exc}); nothing "
                        "was stored (docs/profiles.md#value-ranges)") from None
