"""What the import and study tests compare: a campaign's rows with ids made relative,
a file's hash, an export's JSON through the CLI."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.store.importer import RUN_TABLES

PROVENANCE = {"id", "uuid", "origin_db", "origin_id", "imported_at"}
"""campaigns columns an import sets (the UUID is kept, and compared apart)."""


def file_hash(path: Path) -> str:
    """The database file's bytes, hashed (and its WAL's, when one is there)."""
    h = hashlib.sha256(path.read_bytes())
    wal = Path(f"{path}-wal")
    if wal.exists():
        h.update(wal.read_bytes())
    return h.hexdigest()


def owned(path: Path, cid: int) -> dict[str, list[tuple[Any, ...]]]:
    """Every row campaign ``cid`` owns, per table, its ids replaced by their rank (jobs
    and runs in id order) and the campaign's own id left out: two databases holding the
    same campaign under other ids give the same dict."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        jobs = {r[0]: i for i, r in enumerate(conn.execute(
            "select id from jobs where campaign_id = ? order by id", [cid]))}
        runs = {r[0]: i for i, r in enumerate(conn.execute(
            "select id from runs where campaign_id = ? order by id", [cid]))}

        def rows(sql: str, table: str) -> list[tuple[Any, ...]]:
            out = []
            for r in conn.execute(sql, [cid]):
                d = dict(r)
                d.pop("campaign_id", None)
                if table == "campaigns":
                    d = {k: v for k, v in d.items() if k not in PROVENANCE}
                    d["cancel_run_id"] = runs.get(d["cancel_run_id"])
                if table == "jobs":
                    d["id"] = jobs[d["id"]]
                if table == "runs":
                    d["id"], d["job_id"] = runs[d["id"]], jobs[d["job_id"]]
                    # an old relative run folder is beside its database (paths.stored_path)
                    if d["log_path"] and not d["log_path"].startswith("/"):
                        d["log_path"] = f"{path.parent}/{d['log_path']}"
                if "run_id" in d:
                    d["run_id"] = runs[d["run_id"]]
                out.append(tuple(sorted(d.items())))
            return out if table in ("gpu_samples", "host_samples") else sorted(out, key=repr)

        got = {"campaigns": rows("select * from campaigns where id = ?", "campaigns")}
        for table in ("jobs", "runs", "job_templates", "job_configs"):
            got[table] = rows(f"select * from {table} where campaign_id = ?", table)
        for table in RUN_TABLES:
            got[table] = rows(f"select * from {table} where run_id in (select id from runs "
                              "where campaign_id = ?) order by rowid" if table in
                              ("gpu_samples", "host_samples") else
                              f"select * from {table} where run_id in (select id from runs "
                              "where campaign_id = ?)", table)
        return got
    finally:
        conn.close()


def export_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """``dltop export --format json ARGS`` run in this process, parsed."""
    capsys.readouterr()
    assert cli.main(["export", "--format", "json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def body(table: dict[str, Any]) -> Any:
    """An export's rows and columns (what does not name campaigns: not title, caption)."""
    return {k: v for k, v in table.items() if k in ("columns", "rows")}
