"""Campaign references in a study of several databases (``--db A --db B``,
:mod:`dltop.store.study`): ``latest``, ``all``, a name (the most recent campaign of that
name in any of them), an ``ID`` that one database alone has, or ``FILE:ID`` (FILE the
path as given or its stem; ``FILE:NAME`` too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol, TypeVar

from dltop.store.read import campaigns as stored


class Named(Protocol):
    """A campaign as a reference matches it (a ``queries.CampaignRow``)."""

    @property
    def id(self) -> Any: ...
    @property
    def name(self) -> str: ...


C = TypeVar("C", bound=Named)


def files(db: Any) -> dict[str, set[str]]:
    """Each source's FILE -> the names that address it: FILE, the path as given, its stem."""
    return {str(r["label"]): {str(r["label"]), str(r["given"]), Path(str(r["given"])).stem}
            for r in stored.study_sources(db)}


def in_file(ref: str, path: str) -> str:
    """``ref`` less a ``FILE:`` that names the database at ``path`` (FILE its path or its
    stem, as a study prints it), so that a study's ``b:3`` reads in a command given that
    database alone (``--db b.db``); any other ``ref`` as it is."""
    file, sep, rest = ref.rpartition(":")
    if not (sep and file and rest and path):
        return ref
    same = file == Path(path).stem or os.path.realpath(file) == os.path.realpath(path)
    return rest if same else ref


def match(rows: list[C], newest: list[C], files: dict[str, set[str]], part: str) -> list[C]:
    """The campaigns one part names in a study, ``newest`` last (several: an ambiguous
    ID); :func:`dltop.results.queries.resolve_campaigns` reads the parts."""
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
    if not stored.is_study(db):
        return None
    offsets = {str(r["label"]): (int(r["run_offset"] or 0), int(r["job_offset"] or 0))
               for r in stored.study_sources(db)}
    out = {}
    for c in stored.all_campaigns(db):
        if c.get("study_ref"):
            label, _, origin = str(c["study_ref"]).rpartition(":")
            out[int(c["id"])] = (label, int(origin), *offsets.get(label, (0, 0)))
    return out
