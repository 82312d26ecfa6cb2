"""Events the engine reports upward (to the headless CLI, ``--json``, the TUI).

Plain frozen dataclasses; ``to_dict`` gives the ``--json`` line form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dltop.profiles.jobspec import JobSpec


class _Event:
    """An event whose ``--json`` line is its name, its fields and its job's identity
    (``event=`` names it)."""

    _name: str

    def __init_subclass__(cls, event: str) -> None:
        cls._name = event

    def to_dict(self) -> dict[str, Any]:
        fields = dict(vars(self))
        job = fields.pop("job", None)
        return {"event": self._name, **fields, **(self._of_job(job) if job else {})}

    def _of_job(self, job: JobSpec) -> dict[str, Any]:
        return {"framework": job.framework, "model": job.model, "batch_size": job.batch_size,
                "device": job.device.label, "repeat": job.repeat}


@dataclass(frozen=True)
class CampaignStarted(_Event, event="campaign_started"):
    """The engine took a campaign and is about to run its queued jobs."""

    campaign_id: int
    name: str
    n_jobs: int
    db_path: str


@dataclass(frozen=True)
class RunStarted(_Event, event="run_started"):
    """A runner child is being started for a job."""

    run_id: int
    job_id: int
    position: int
    n_jobs: int
    job: JobSpec
    log_path: str

    def _of_job(self, job: JobSpec) -> dict[str, Any]:
        return {"iterations": job.iterations, "warmup": job.warmup, **super()._of_job(job)}


@dataclass(frozen=True)
class RunProgress(_Event, event="iteration"):
    """One training iteration finished in the child."""

    run_id: int
    index: int
    total: int
    warmup: bool
    seconds: float
    loss: float | None


@dataclass(frozen=True)
class RunFinished(_Event, event="run_finished"):
    """A run reached its final status and is stored."""

    run_id: int
    job: JobSpec
    status: str
    median_s: float | None
    samples_per_s: float | None
    cv: float | None
    noisy: bool
    message: str | None


@dataclass(frozen=True)
class CampaignFinished(_Event, event="campaign_finished"):
    """Every job reached a final state (or the campaign was cancelled)."""

    campaign_id: int
    status: str
    counts: dict[str, int]
    """The campaign's jobs by status, those earlier engines ran included (``--resume``)."""
    ran: dict[str, int]
    """This engine's runs by status (retries each count; and the queued jobs its stop
    cancelled)."""


@dataclass(frozen=True)
class DevicesBusy(_Event, event="waiting_for_devices"):
    """A run waits for devices another process on the host leases (see jobs.lease)."""

    campaign_id: int
    waiting_for: str
    """Its devices, place in line and who it waits for (``DeviceLease.waiting_text``)."""


@dataclass(frozen=True)
class NoDeviceLease(_Event, event="no_device_lease"):
    """Runs go on without the host-wide lease (other engines may share their devices)."""

    campaign_id: int
    reason: str


EngineEvent = (CampaignStarted | RunStarted | RunProgress | RunFinished | CampaignFinished
               | DevicesBusy | NoDeviceLease)
