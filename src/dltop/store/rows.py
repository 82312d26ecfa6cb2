"""Rows as stored: the timestamp format, the ``jobs`` row of a job spec and its insert."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

import sqlite_utils

from dltop.catalog import JobStatus, RunStatus
from dltop.profiles.model import JobSpec


def utc_now() -> str:
    """ISO-8601 UTC timestamp with milliseconds."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def job_row(campaign_id: int, position: int, status: JobStatus | RunStatus,
            job: JobSpec) -> dict[str, Any]:
    """The ``jobs`` table row of a job spec (its own columns: :meth:`JobSpec.columns`)."""
    return {"campaign_id": campaign_id, "position": position, "status": status,
            **job.columns()}


def marks(values: Collection[object]) -> str:
    """``?, ?, ?``: one SQL parameter mark per value, for ``in (...)``."""
    return ", ".join("?" for _ in values)


def pk(value: Any) -> int:
    """The primary key an insert returned (an int, never None)."""
    if value is None:
        raise RuntimeError("insert returned no primary key")
    return int(value)


def insert_jobs(db: sqlite_utils.Database, campaign_id: int, first_position: int,
                jobs: Sequence[JobSpec],
                statuses: Sequence[JobStatus | RunStatus] | None = None) -> list[int]:
    """Insert job rows from ``first_position`` on; the caller holds the transaction."""
    ids = []
    for k, job in enumerate(jobs):
        status = statuses[k] if statuses else JobStatus.QUEUED
        row = db.table("jobs").insert(job_row(campaign_id, first_position + k, status, job))
        ids.append(pk(row.last_pk))
    return ids
