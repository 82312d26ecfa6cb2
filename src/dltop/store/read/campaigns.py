"""Campaign rows, a study's sources and references, and what captions read of campaigns.

A study of several databases (:mod:`dltop.store.study`) is one in-memory database whose
campaigns carry ``study_ref`` (``FILE:ID``) and whose ``study_sources`` table names
its files; every function here reads either.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from dltop.catalog import ACTIVE_CAMPAIGN_STATUSES
from dltop.store.fence import COLUMN as GENERATION
from dltop.store.read.runs import marks
from dltop.store.read.schema import has_table

STUDY_TABLE = "study_sources"
"""A study database's sources: index, the path as given, its stem, the file's real path
(:mod:`dltop.store.study` writes it)."""


def all_campaigns(db: Any) -> list[dict[str, Any]]:
    """Every ``campaigns`` row (all its columns: an older database lacks some), by id."""
    return list(db.query("select * from campaigns order by id"))


def recent_campaigns(db: Any, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest ``campaigns`` rows, newest first."""
    return list(db.query("select * from campaigns order by id desc limit ?", [limit]))


def campaigns_by_id(db: Any, ids: Sequence[int]) -> list[dict[str, Any]]:
    """The ``campaigns`` rows of ``ids`` (every column), by id."""
    if not ids:
        return []
    return list(db.query(f"select * from campaigns where id in ({marks(ids)}) order by id",
                         list(ids)))


@dataclass(frozen=True)
class OpenCampaign:
    """A campaign that is not finished, with the engine that last ran it."""

    id: int
    name: str
    status: str
    engine_pid: int | None
    engine_start_time: float | None
    waiting_for: str | None = None
    """While ``status`` is ``waiting``: the device it waits for and who holds it."""
    engine_host: str | None = None
    """The engine's host (None: a campaign stored before migration 22)."""
    engine_heartbeat_s: float | None = None
    """The engine's last heartbeat, epoch seconds (:func:`dltop.procs.engine_alive`)."""
    owner_generation: int | None = None
    """Its owner's generation (:mod:`dltop.store.fence`; None before migration 24)."""
    pack: bool = False
    """It runs with ``--pack`` (its runs share the host on disjoint devices)."""
    waiting_since_s: float | None = None
    """While waiting: since when, epoch seconds (None before migration 38)."""
    waiting_devices: str | None = None
    """While waiting: the devices it wants (``gpu 0-1``), without who holds them."""
    waiting_holders: int | None = None
    """While waiting: how many other processes hold them or wait ahead for them."""


def open_campaigns(db: Any, statuses: Collection[str] = ACTIVE_CAMPAIGN_STATUSES
                   ) -> list[OpenCampaign]:
    """Campaigns in one of ``statuses`` (by default still ``queued``, ``running``,
    ``paused`` or ``waiting``), oldest first, for the engine's store and the read-only
    commands alike (a column an older database lacks reads as its default)."""
    return [OpenCampaign(r["id"], r["name"], r["status"], r["engine_pid"],
                         r["engine_start_time"], r.get("waiting_for"), r.get("engine_host"),
                         r.get("engine_heartbeat_s"), r.get(GENERATION), bool(r.get("pack")),
                         r.get("waiting_since_s"), r.get("waiting_devices"),
                         r.get("waiting_holders"))
            for r in db.query(f"select * from campaigns where status in ({marks(statuses)}) "
                              "order by id", sorted(statuses))]


def is_study(db: Any) -> bool:
    """Whether ``db`` is a study of several databases (its campaigns carry ``FILE:ID``)."""
    return has_table(db, STUDY_TABLE)


def study_sources(db: Any) -> list[dict[str, Any]]:
    """A study's files: ``label`` (its FILE), ``given`` (the path as given), and the
    offsets of its runs' and jobs' ids (``run_offset``, ``job_offset``)."""
    return list(db.query(f"select label, given, run_offset, job_offset from {STUDY_TABLE}"))
