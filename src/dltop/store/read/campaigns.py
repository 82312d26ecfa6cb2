"""Campaign rows, a study's sources and references, and what captions read of campaigns.

A study of several databases (:mod:`dltop.store.study`) is one in-memory database whose
campaigns carry ``study_ref`` (``FILE:ID``) and whose ``study_sources`` table names
its files; every function here reads either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def campaigns_with_status(db: Any, statuses: Sequence[str]) -> list[dict[str, Any]]:
    """The ``campaigns`` rows whose status is one of ``statuses``, oldest first."""
    return list(db.query(f"select * from campaigns where status in ({marks(statuses)}) "
                         "order by id", list(statuses)))


def is_study(db: Any) -> bool:
    """Whether ``db`` is a study of several databases (its campaigns carry ``FILE:ID``)."""
    return has_table(db, STUDY_TABLE)


def study_sources(db: Any) -> list[dict[str, Any]]:
    """A study's files: ``label`` (its FILE), ``given`` (the path as given), and the
    offsets of its runs' and jobs' ids (``run_offset``, ``job_offset``)."""
    return list(db.query(f"select label, given, run_offset, job_offset from {STUDY_TABLE}"))
