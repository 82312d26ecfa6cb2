"""One consistent read of a campaign for a live viewer: queue, current run, log tail."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import sqlite_utils

from dltop.catalog import ACTIVE_CAMPAIGN_STATUSES, JobStatus, RunStatus
from dltop.procs import engine_alive
from dltop.procs import read_log_tail as _read_tail
from dltop.results.queries import (
    CampaignRow,
    CurrentRun,
    campaign_row,
    campaigns,
    current_runs,
    run_label,
    status_counts,
)

RECENT_ITERATIONS = 60
"""Iterations of the current run kept for the sparkline and the rate."""
LOG_TAIL_BYTES = 8192
"""Only the end of the runner's log is read, however much it writes."""


@dataclass(frozen=True)
class JobLine:
    """One job of the queue, as a row."""

    job_id: int
    position: int
    status: str
    framework: str
    model: str
    batch_size: int
    device: str
    repeat: int
    median_s: float | None = None
    """The job's latest run's median seconds per iteration, once it has one."""
    contaminated: bool = False
    """The job's latest run saw foreign processes on its GPUs or pinned CPUs."""


@dataclass(frozen=True, kw_only=True)
class RunView(CurrentRun):
    """The run in progress, with what the run panel shows beyond its progress."""

    recent_s: tuple[float, ...]
    """Seconds of the most recent iterations, oldest first."""
    samples_per_iter: int
    log_tail: tuple[str, ...]

    @property
    def median_s(self) -> float | None:
        """Median of the recent iterations' seconds (None before the first)."""
        return statistics.median(self.recent_s) if self.recent_s else None

    @property
    def samples_per_s(self) -> float | None:
        """Throughput over the recent iterations."""
        m = self.median_s
        return self.samples_per_iter / m if m else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the recent median pace."""
        m = self.median_s
        return None if m is None else max(0, self.total - self.done) * m


@dataclass(frozen=True)
class CampaignView:
    """A campaign as a viewer sees it at one moment."""

    campaign: CampaignRow
    control: str | None
    engine_pid: int | None
    engine_alive: bool
    counts: dict[str, int]
    jobs: tuple[JobLine, ...]
    current: RunView | None
    """The newest run in progress (the one the run panel shows)."""
    read_at: str
    progress: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Job id -> (iterations done, total) of every run in progress (several when packed)."""
    waiting_for: str | None = None
    """While the campaign is ``waiting``: the device and who holds it (jobs.lease)."""

    @property
    def active(self) -> bool:
        """True while the campaign's engine has work running or queued."""
        return self.engine_alive and self.campaign.status in ACTIVE_CAMPAIGN_STATUSES


def read_log_tail(path: str | None, lines: int = 8) -> tuple[str, ...]:
    """The last ``lines`` lines of a log, reading at most :data:`LOG_TAIL_BYTES`."""
    if not path:
        return ()
    text = _read_tail(Path(path), LOG_TAIL_BYTES).splitlines()
    return tuple(line[-500:] for line in text[-lines:])


def latest_campaign_id(db: sqlite_utils.Database) -> int | None:
    """The newest campaign's id, or None in an empty database."""
    rows = campaigns(db, limit=1)
    return rows[0].id if rows else None


def _current(db: sqlite_utils.Database, campaign_id: int, log_lines: int) -> RunView | None:
    rows = list(db.query(
        "select r.id, r.job_id, r.started_at, r.log_path, r.samples_per_iter, j.framework, "
        "j.model, j.batch_size, j.device, j.repeat, j.iterations, j.warmup from runs r "
        "join jobs j on j.id = r.job_id where r.campaign_id = ? and r.status = ? "
        "order by r.id desc limit 1", [campaign_id, RunStatus.RUNNING]))
    if not rows:
        return None
    r = rows[0]
    its = list(db.query("select idx, seconds, warmup from iterations where run_id = ? "
                        "order by idx desc limit ?", [r["id"], RECENT_ITERATIONS]))
    done = its[0]["idx"] + 1 if its else 0
    measured = [i["seconds"] for i in reversed(its) if not i["warmup"]]
    recent = measured or [i["seconds"] for i in reversed(its)]
    return RunView(r["id"], r["job_id"], run_label(r), done, r["iterations"] + r["warmup"],
                   r["warmup"], r["started_at"], recent_s=tuple(recent),
                   samples_per_iter=r["samples_per_iter"] or r["batch_size"],
                   log_tail=read_log_tail(r["log_path"], log_lines))


def read_campaign(db: sqlite_utils.Database, campaign_id: int, *, max_jobs: int = 2000,
                  log_lines: int = 8) -> CampaignView | None:
    """Everything the main screen shows of a campaign (None if it does not exist)."""
    rows = list(db.query("select * from campaigns where id = ?", [campaign_id]))
    if not rows:
        return None
    c = rows[0]
    camp = campaign_row(c)
    jobs = tuple(JobLine(j["id"], j["position"], j["status"], j["framework"], j["model"],
                         j["batch_size"], j["device"], j["repeat"], j["median_s"],
                         bool(j["contaminated"]))
                 for j in db.query(
                     "select id, position, status, framework, model, batch_size, device, "
                     "repeat, (select r.median_s from runs r where r.job_id = jobs.id "
                     "order by r.id desc limit 1) as median_s, "
                     "(select r.contaminated from runs r where r.job_id = jobs.id "
                     "order by r.id desc limit 1) as contaminated from jobs where campaign_id = ? "
                     "and status != ? order by position limit ?",
                     [campaign_id, JobStatus.REMOVED, max_jobs]))
    counts = status_counts(db, campaign_id)
    alive = engine_alive(c["engine_pid"], c["engine_start_time"])
    current = _current(db, campaign_id, log_lines)
    return CampaignView(camp, c.get("control"), c["engine_pid"], alive, counts, jobs,
                        current, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        {r.job_id: (r.done, r.total) for r in current_runs(db, campaign_id)},
                        c.get("waiting_for"))
