"""Campaign references in a study of several databases (``--db A --db B``,
:mod:`dltop.store.study`): ``latest``, ``all``, a name (the most recent campaign of that
name in any of them), an ``ID`` that one database alone has, or ``FILE:ID`` (FILE the
path as given or its stem; ``FILE:NAME`` too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop.errors import UserError

if TYPE_CHECKING:
    from dltop.results.queries import CampaignRow

STUDY_TABLE = "study_sources"
"""The study's sources (:data:`dltop.store.study.STUDY_TABLE`)."""


def is_study(db: Any) -> bool:
    """Whether ``db`` is a study of several databases (its campaigns carry ``FILE:ID``)."""
    return db.execute("select 1 from sqlite_master where type = 'table' and name = ?",
                      [STUDY_TABLE]).fetchone() is not None


def resolve(db: Any, ref: str | int | None, given_as: str,
            campaign_row: Callable[[dict[str, Any]], CampaignRow]) -> list[CampaignRow]:
    """The campaigns ``ref`` names in a study, in the study's order, each once
    (``campaign_row`` makes each from its row: :func:`dltop.results.queries.campaign_row`).

    Raises:
        UserError: a part that names no campaign, or an ``ID`` several databases have
            (the message lists their ``FILE:ID``).
    """
    rows = [campaign_row(r) for r in db.query("select * from campaigns order by id")]
    if not rows:
        raise UserError("no campaigns in these databases yet")
    files = {str(r["label"]): {str(r["label"]), str(r["given"]), Path(str(r["given"])).stem}
             for r in db.query(f"select label, given from {STUDY_TABLE}")}
    newest = sorted(rows, key=lambda c: (c.created_at or "", int(c.id)))
    parts = ["latest"] if ref is None else [p.strip() for p in str(ref).split(",")]
    if not all(parts):
        raise UserError(f"{given_as}: empty part in {ref!r} (use e.g. h100:3,h200:1 or all)")
    found: dict[int, CampaignRow] = {}
    for part in parts:
        if part == "all":
            found.update((int(c.id), c) for c in rows)
            continue
        hits = [newest[-1]] if part == "latest" else _match(rows, newest, files, part)
        if not hits:
            known = ", ".join(f"{c.id} `{c.name}`" for c in reversed(newest[-5:]))
            raise UserError(f"{given_as}: no campaign {part!r} in these databases (most "
                            f"recent: {known}; FILE:ID names one, FILE the path or its stem)")
        if len(hits) > 1:
            raise UserError(f"{given_as}: campaign {part} is in several databases: "
                            f"{', '.join(str(c.id) for c in hits)}; give FILE:ID")
        found[int(hits[0].id)] = hits[0]
    return [found[i] for i in sorted(found)]


def _match(rows: list[CampaignRow], newest: list[CampaignRow],
           files: dict[str, set[str]], part: str) -> list[CampaignRow]:
    """The campaigns one part names (several: an ambiguous ID)."""
    named = [c for c in reversed(newest) if c.name == part]
    if named:
        return named[:1]
    if part.isdigit():
        return [c for c in rows if str(c.id).rpartition(":")[2] == part]
    file, sep, rest = part.rpartition(":")
    if not sep:
        return []
    labels = [label for label, names in files.items() if file in names]
    mine = [c for c in rows if str(c.id).rpartition(":")[0] in labels]
    if rest.isdigit():
        return [c for c in mine if str(c.id).rpartition(":")[2] == rest]
    return [c for c in reversed(newest) if c in mine and c.name == rest][:1]


def run_refs(db: Any) -> dict[int, tuple[str, int, int, int]] | None:
    """Campaign id -> (FILE, its ID there, the offsets of its runs' and its jobs' ids) in
    a study; None for one database. A run is ``FILE:RUN``, RUN its id here less the
    offset."""
    if not is_study(db):
        return None
    offsets = {str(r["label"]): (int(r["run_offset"] or 0), int(r["job_offset"] or 0))
               for r in db.query(f"select label, run_offset, job_offset from {STUDY_TABLE}")}
    out = {}
    for r in db.query("select id, study_ref from campaigns where study_ref is not null"):
        label, _, cid = str(r["study_ref"]).rpartition(":")
        out[int(r["id"])] = (label, int(cid), *offsets.get(label, (0, 0)))
    return out
