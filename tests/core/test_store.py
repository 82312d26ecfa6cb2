"""Opening, migrating and refusing databases."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from tests.store.olddb import migrated_to

from dltop.errors import UserError
from dltop.store import connect, migrations, resolve_db_path
from dltop.store.migrations import MIGRATIONS, Migration


def test_migrations_apply_once_and_enable_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "d.db"
    db = connect(path)
    assert {"campaigns", "jobs", "runs", "iterations", "environment"} <= set(db.table_names())
    versions = [r["version"] for r in db["schema_migrations"].rows]
    assert versions == [m.version for m in MIGRATIONS]
    db.conn.close()
    db2 = connect(path)
    assert [r["version"] for r in db2["schema_migrations"].rows] == versions
    assert db2.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_refuses_foreign_sqlite_and_garbage(tmp_path: Path, foreign_sqlite: Any) -> None:
    other = foreign_sqlite(tmp_path / "other.db", "create table t (x)")
    with pytest.raises(UserError, match="not a dltop database"):
        connect(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"x" * 4096)
    with pytest.raises(UserError, match="not a SQLite database"):
        connect(junk)
    with pytest.raises(UserError, match="no such database"):
        connect(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_db_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DLTOP_DB", raising=False)
    assert resolve_db_path(None) == tmp_path / "xdg" / "dltop" / "dltop.db"
    monkeypatch.setenv("DLTOP_DB", str(tmp_path / "env.db"))
    assert resolve_db_path(None) == tmp_path / "env.db"
    assert resolve_db_path(str(tmp_path / "cli.db")) == tmp_path / "cli.db"


def test_migrations_are_listed_in_order_without_gaps() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def _old_database(path: Path, versions: int) -> None:
    """A database as dltop before this store left it: migrations 1..versions, one campaign.

    Written with plain sqlite3 and the old record format (its names differ: released
    names were reworded), as an older dltop would have.
    """
    db = migrated_to(path, versions, name=lambda m: f"old wording {m.version}")
    db.execute("insert into campaigns (name, status, created_at) values ('old', 'finished', 'x')")
    db.close()


def test_a_database_of_the_old_code_opens_without_rerunning_migrations(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_database(path, versions=5)
    db = connect(path)
    rows = list(db.query("select version, name, applied_at from schema_migrations "
                         "order by version"))
    assert [r["version"] for r in rows] == [m.version for m in MIGRATIONS]
    assert [r["name"] for r in rows[:5]] == [f"old wording {v}" for v in range(1, 6)]
    assert {r["applied_at"] for r in rows[:5]} == {"2026-11-01T00:00:00Z"}
    assert [r["name"] for r in db.query("select name from campaigns")] == ["old"]
    assert connect(path, create=False).table_names() == db.table_names()


def test_a_database_missing_later_migrations_gets_only_those(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_database(path, versions=3)
    db = connect(path)
    assert "cancel_run_id" in db["campaigns"].columns_dict  # migration 4 ran
    assert [r["name"] for r in db.query("select name from schema_migrations where version <= 3 "
                                        "order by version")] == [
        "old wording 1", "old wording 2", "old wording 3"]


@pytest.mark.parametrize("create", [True, False])
def test_a_database_of_a_newer_dltop_is_refused_unwritten(tmp_path: Path, create: bool) -> None:
    path = tmp_path / "new.db"
    connect(path).conn.close()
    conn = sqlite3.connect(path)
    conn.execute("insert into schema_migrations values (?, 'from the future', 'x')",
                 [len(MIGRATIONS) + 1])
    conn.execute("pragma journal_mode=delete")  # everything in the main file, to hash it
    conn.commit()
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(UserError, match=r"newer dltop \(schema version "
                                        rf"{len(MIGRATIONS) + 1}, this dltop knows up to "
                                        rf"{len(MIGRATIONS)}\)") as exc:
        connect(path, create=create)
    assert exc.value.exit_code == 2
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_failing_migration_leaves_no_trace_and_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.db"
    connect(path).conn.close()

    def half_done(db: sqlite_utils.Database) -> None:
        db.table("extra").create({"x": int})
        db.table("runs").add_column("extra_col", int)
        raise sqlite3.OperationalError("disk I/O error")

    bad = Migration(len(MIGRATIONS) + 1, "extra", half_done)
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, bad))
    with pytest.raises(UserError, match="cannot write the database: disk I/O error"):
        connect(path)
    db = sqlite_utils.Database(path)
    assert "extra" not in db.table_names() and "extra_col" not in db["runs"].columns_dict
    assert bad.version not in migrations.applied_versions(db)
    good = Migration(bad.version, "extra", lambda d: d.table("extra").create({"x": int}))
    monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, good))
    assert "extra" in connect(path).table_names()


def test_migration_7_recomputes_old_config_keys_from_the_spec(tmp_path: Path) -> None:
    from dltop.profiles.loader import parse
    from dltop.store.rows import job_row

    path = tmp_path / "old.db"
    _old_database(path, versions=6)
    text = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
            'devices = ["cpu:1"]\nlr = {lr}\n')
    jobs = [parse(text.format(lr=lr), "p.toml", "p").jobs[0] for lr in (0.01, 0.5)]
    old = sqlite_utils.Database(path)
    for position, job in enumerate(jobs):
        row = job_row(1, position, "done", job)
        # the old form, which left lr out: both jobs had one key
        row["config_key"] = "torch|fcn-r|8|cpu:1|fp32|synthetic"
        spec = job.to_json_dict()
        del spec["seed"]  # an older spec without a later field takes its default
        row["spec_json"] = json.dumps(spec)
        old["jobs"].insert(row)
    old["jobs"].insert({**job_row(1, 2, "done", jobs[0]), "config_key": "kept",
                        "spec_json": "{not json"})
    old.close()
    db = connect(path)
    keys = [r["config_key"] for r in db.query("select config_key from jobs order by position")]
    assert keys == [jobs[0].config_key, jobs[1].config_key, "kept"]
    assert keys[0] != keys[1]
