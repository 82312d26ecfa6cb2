"""Migration 25: every campaign's UUID and, for an imported one, where it came from.

``dltop import`` (:mod:`dltop.store.importer`) copies campaigns between databases under
new ids; the UUID is what stays, so importing a campaign twice adds nothing. New
campaigns get a random (version 4) UUID from an insert trigger, so every writer, the
engine and SQL by hand alike, gives one without naming the column.
"""

from __future__ import annotations

import uuid
from typing import Any

V25_CAMPAIGN_COLUMNS: dict[str, type] = {
    "uuid": str,
    "origin_db": str,
    "origin_id": int,
    "imported_at": str,
}
"""The campaign's UUID; for an imported campaign the source database's path, the
campaign's id there and when it was imported (NULL for a campaign run here)."""

UUID4_SQL = ("lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || "
             "substr(lower(hex(randomblob(2))), 2) || '-' || "
             "substr('89ab', 1 + (abs(random()) % 4), 1) || "
             "substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))")
"""A random version-4 UUID in SQLite's SQL (the text form of :func:`uuid.uuid4`)."""

_NAMESPACE = uuid.UUID("6f1c2b7e-4a9d-4e55-9a3b-0d2f6a1c8e40")
"""dltop's namespace for the UUIDs of campaigns stored before migration 25."""


def legacy_uuid(row: dict[str, Any]) -> str:
    """The UUID of a campaign stored before migration 25: derived from what the row
    holds (version 5), not drawn at random.

    A database opened read-only (an import's source) is migrated in a copy, each time
    it is read: a random UUID there would differ between two imports of the same
    file, and the second would add the campaign again.
    """
    fields = (row.get("id"), row.get("name"), row.get("created_at"), row.get("host"),
              row.get("profiles"), row.get("argv"), row.get("dltop_version"))
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join("" if f is None else str(f)
                                                   for f in fields)))


def v25(db: Any) -> None:
    for name, kind in V25_CAMPAIGN_COLUMNS.items():
        db["campaigns"].add_column(name, kind)
    conn = db.conn
    rows = [dict(zip(("id", "name", "created_at", "host", "profiles", "argv",
                      "dltop_version"), r, strict=True))
            for r in conn.execute("select id, name, created_at, host, profiles, argv, "
                                  "dltop_version from campaigns")]
    conn.executemany("update campaigns set uuid = ? where id = ?",
                     [(legacy_uuid(r), r["id"]) for r in rows])
    conn.execute("create unique index idx_campaigns_uuid on campaigns (uuid)")
    conn.execute("create trigger campaigns_uuid after insert on campaigns "
                 f"when new.uuid is null begin update campaigns set uuid = ({UUID4_SQL}) "
                 "where id = new.id; end")
