"""Opening, migrating and refusing databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.store import connect, resolve_db_path
from dltop.store.migrations import MIGRATIONS


def test_migrations_apply_once_and_enable_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "d.db"
    db = connect(path)
    assert {"campaigns", "jobs", "runs", "iterations", "environment"} <= set(db.table_names())
    versions = [r["version"] for r in db["schema_migrations"].rows]
    assert versions == sorted(MIGRATIONS)
    db.conn.close()
    db2 = connect(path)
    assert [r["version"] for r in db2["schema_migrations"].rows] == versions
    assert db2.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_refuses_foreign_sqlite_and_garbage(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("create table t (x)")
    conn.commit()
    conn.close()
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
