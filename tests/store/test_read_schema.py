"""store/read/schema.py: a schema's facts cached per connection, renewed when it changes."""

from __future__ import annotations

from dltop.store.db import memory_db
from dltop.store.read.schema import columns, has_table


def test_facts_follow_a_schema_change_on_the_same_connection() -> None:
    db = memory_db()
    db.execute("create table a (x integer)")
    assert has_table(db, "a") and not has_table(db, "b")
    assert columns(db, "a") == {"x"} and columns(db, "b") == frozenset()
    db.execute("alter table a add column y text")
    db.execute("create table b (z integer)")
    assert has_table(db, "b") and columns(db, "a") == {"x", "y"}
