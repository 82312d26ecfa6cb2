"""A queued job as the engine takes it, importable without the engine (resume, campaign)."""

from __future__ import annotations

from dataclasses import dataclass

from dltop.profiles.jobspec import JobSpec


@dataclass(frozen=True)
class QueuedJob:
    """A job row waiting to run."""

    job_id: int
    position: int
    spec: JobSpec
