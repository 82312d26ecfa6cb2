"""Migration 25 and what ``dltop import`` copies (issue 40 item 2): every campaign has a
UUID, and every table of the schema is either copied with its campaign or owned by none."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.store.olddb import migrated_to

from dltop.store import connect, memory_db
from dltop.store.importer import CAMPAIGN_TABLES, NOT_OWNED, RUN_TABLES
from dltop.store.schema_origin import legacy_uuid


def test_every_table_is_copied_or_owned_by_no_campaign() -> None:
    # a migration that adds a table fails here until the importer copies it (or says why not)
    tables = set(memory_db().table_names())
    assert tables == {"campaigns", "jobs", "runs", *RUN_TABLES, *CAMPAIGN_TABLES, *NOT_OWNED}


def test_new_campaigns_get_a_random_uuid4() -> None:
    db = memory_db()
    for name in ("a", "b"):
        db.execute("insert into campaigns (name, status, created_at) values (?, 'queued', 'x')",
                   [name])
    ids = [uuid.UUID(r["uuid"]) for r in db.query("select uuid from campaigns order by id")]
    assert [u.version for u in ids] == [4, 4] and ids[0] != ids[1]
    assert all(str(u) == r["uuid"] for u, r in zip(ids, db.query(
        "select uuid from campaigns order by id"), strict=True))


def test_old_campaigns_get_the_same_uuid_in_every_copy(tmp_path: Path) -> None:
    uuids = []
    for name in ("one.db", "two.db"):
        old = migrated_to(tmp_path / name, 23)
        old.execute("insert into campaigns (id, name, status, created_at, host) "
                    "values (3, 'old', 'finished', '2026-01-01T00:00:00Z', 'h')")
        old.conn.commit()
        old.close()
        db = connect(tmp_path / name)  # migrates to 25
        uuids.append(next(db.query("select uuid from campaigns"))["uuid"])
        db.close()
    assert uuids[0] == uuids[1] == legacy_uuid(
        {"id": 3, "name": "old", "created_at": "2026-01-01T00:00:00Z", "host": "h"})
    assert uuid.UUID(uuids[0]).version == 5
