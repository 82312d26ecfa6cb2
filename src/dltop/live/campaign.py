"""One consistent read of a campaign for a live viewer: queue, current run, log tail.

The queue may hold 100 000 jobs, so a read fetches one window of it and the counts,
never the whole list (:mod:`dltop.store.read.queue_view` reads them).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dltop.catalog import (
    ACTIVE_CAMPAIGN_STATUSES,
    CampaignStatus,
    Control,
    JobStatus,
    control_of,
)
from dltop.jobs.executors.where import queued_reason
from dltop.live.eta import eta_inputs
from dltop.live.health import (
    CampaignEta,
    LossTrend,
    PendingWork,
    Stall,
    campaign_eta,
    loss_trend,
    stall,
)
from dltop.live.serve_live import ServeLive, serve_live
from dltop.procs import engine_alive
from dltop.procs import read_log_tail as _read_tail
from dltop.results import labels
from dltop.results.queries import (
    CampaignRow,
    CurrentRun,
    campaign_row,
    current_runs,
    run_label,
    running_settings,
)
from dltop.store import samples
from dltop.store.read import jobruns, queue_view, slurm
from dltop.store.read.campaigns import campaigns_by_id
from dltop.store.read.jobs import status_counts

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

RECENT_ITERATIONS = 60
"""Iterations of the current run kept for the sparkline and the rate."""
LOG_TAIL_BYTES = 8192
"""Only the end of the runner's log is read, however much it writes."""
QUEUE_WINDOW = 200
"""Queue rows a read fetches when the viewer asks for no other window."""
QUEUE_EDGE = 100
"""Rows at each end of the queue every read fetches too, so that Home and End show at once."""

wall_clock = time.time
"""The viewer's clock (epoch seconds) for elapsed and stall times; tests pin it."""


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
    settings: str = ""
    """The identity fields varying in the campaign, as the run label shows them
    (:func:`dltop.results.labels.settings_text`: ``bf16 cuda graphs``)."""


@dataclass(frozen=True, kw_only=True)
class RunView(CurrentRun):
    """The run in progress, with what the run panel shows beyond its progress."""

    recent_s: tuple[float, ...]
    """Seconds of the most recent iterations, oldest first."""
    samples_per_iter: int
    log_tail: tuple[str, ...]
    model: str = ""
    """Its model: a transformer's samples are tokens (the bar says tokens/s)."""
    losses: tuple[float | None, ...] = ()
    """Losses of the most recent iterations, oldest first (None: not reported)."""
    read_s: float | None = None
    """The viewer's clock (epoch seconds) when this was read."""
    started_s: float | None = None
    """Epoch seconds at which the run started."""
    last_iteration_s: float | None = None
    """Epoch seconds at which its newest iteration ended (None before the first)."""
    tree_cpu_pct: float | None = None
    """CPU of the run's process tree in its newest telemetry window (100 = one core)."""
    tree_rss_bytes: int | None = None
    """Resident memory of the run's process tree in its newest telemetry window."""
    serve: ServeLive | None = None
    """A serve run's requests so far (None: not a serve run)."""

    @property
    def elapsed_s(self) -> float | None:
        """Seconds since the run started, at the time of the read."""
        if self.read_s is None or self.started_s is None:
            return None
        return max(0.0, self.read_s - self.started_s)

    @property
    def stall(self) -> Stall | None:
        """How long since its last iteration, held to max(5 s, 10 x median step)."""
        if self.read_s is None:
            return None
        step = self.median_s if self.recent_s else None
        asked = self.serve.asked_rate_per_s if self.serve is not None else None
        if step is not None and asked:  # a slow open loop's requests end 1/rate apart
            step = max(step, 1 / asked)
        return stall(self.read_s, self.last_iteration_s, self.started_s, step)

    @property
    def loss(self) -> LossTrend | None:
        """The newest loss and its trend (None when the runner reports none)."""
        return loss_trend(self.losses)

    @property
    def median_s(self) -> float | None:
        """Median of the recent iterations' seconds (None before the first)."""
        return statistics.median(self.recent_s) if self.recent_s else None

    @property
    def samples_per_s(self) -> float | None:
        """Throughput over the recent iterations: their samples over their seconds (the
        one definition of samples/s, docs/metrics.md)."""
        total = sum(self.recent_s)
        return self.samples_per_iter * len(self.recent_s) / total if total > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the recent median pace; a serve run's at the rate its
        requests end (its iterations are requests in flight together: their latency
        is no pace)."""
        if self.serve is not None:
            return self.serve.seconds_left(max(0, self.total - self.done))
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
    progress: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Job id -> (iterations done, total) of every run in progress (several when packed)."""
    waiting_for: str | None = None
    """While the campaign is ``waiting``: the device and who holds it (jobs.lease)."""
    jobs_offset: int = 0
    """Row of ``jobs[0]`` in the whole queue: ``jobs`` is a window of it."""
    running_row: int | None = None
    """Row in the whole queue of the current run's job (None when none runs)."""
    head: tuple[JobLine, ...] = ()
    """The queue's first rows (:data:`QUEUE_EDGE`)."""
    tail: tuple[JobLine, ...] = ()
    """The queue's last rows (:data:`QUEUE_EDGE`), ending with its last job."""
    eta: CampaignEta | None = None
    """Time left for the queue, at the pace of the campaign's finished runs (None while
    no engine runs the campaign)."""
    engine_start_time: float | None = None
    """The engine process's start time as recorded (with its pid, what liveness checks)."""
    engine_host: str | None = None
    """The owning engine's host (None: a campaign stored before migration 22)."""
    engine_heartbeat_s: float | None = None
    """Its last heartbeat, epoch seconds (what liveness checks from another host)."""

    @property
    def job_total(self) -> int:
        """Rows of the whole queue: the campaign's jobs that are not removed."""
        return sum(n for s, n in self.counts.items() if s != JobStatus.REMOVED)

    @property
    def active(self) -> bool:
        """True while the campaign's engine has work running or queued."""
        return self.engine_alive and self.campaign.status in ACTIVE_CAMPAIGN_STATUSES

    @property
    def paused(self) -> bool:
        """Paused, or a pause asked and waiting for the run going on (``p`` resumes)."""
        return (self.campaign.status == CampaignStatus.PAUSED
                or control_of(self.control) is Control.PAUSE)


def engine_changed(view: CampaignView) -> bool:
    """Whether the campaign's engine started or died since ``view`` was read: a pid check
    on its host, its heartbeat's age from another, not a read."""
    return engine_alive(view.engine_pid, view.engine_start_time, view.engine_host,
                        view.engine_heartbeat_s) != view.engine_alive


def read_log_tail(path: str | None, lines: int = 8) -> tuple[str, ...]:
    """The last ``lines`` lines of a log, reading at most :data:`LOG_TAIL_BYTES`."""
    if not path:
        return ()
    text = _read_tail(Path(path), LOG_TAIL_BYTES).splitlines()
    # a longer line keeps its end, marked: "r message that..." read as the line's start
    return tuple(line if len(line) <= 500 else "…" + line[-499:] for line in text[-lines:])


def _current(db: sqlite_utils.Database, campaign_id: int, log_lines: int) -> RunView | None:
    rows = jobruns.running(db, campaign_id)
    if not rows:
        return None
    r = rows[-1]  # the newest: the one the run panel shows
    its = queue_view.recent_iterations(db, r["id"], RECENT_ITERATIONS)
    done = its[0]["idx"] + 1 if its else 0
    measured = [i["seconds"] for i in reversed(its) if not i["warmup"]]
    recent = measured or [i["seconds"] for i in reversed(its)]
    # The engine's sampler already measures the tree (psutil counters primed, children
    # followed, whoever runs the viewer): its newest window is the figure to show.
    tree = samples.newest_host(db, r["id"])
    settings = running_settings(db, campaign_id, [int(r["job_id"])]).get(int(r["job_id"]), "")
    return RunView(r["id"], r["job_id"], run_label(r, settings), done, r["total"],
                   r["warmup"], r["started_at"], queued_reason(r, True, "submitted"),
                   recent_s=tuple(recent),
                   samples_per_iter=r["samples_per_iter"] or r["batch_size"],
                   log_tail=read_log_tail(r["log_path"], log_lines), model=r["model"],
                   losses=tuple(i["loss"] for i in reversed(its)), read_s=wall_clock(),
                   started_s=_epoch(r["started_at"]),
                   last_iteration_s=its[0]["t_wall_s"] if its else None,
                   tree_cpu_pct=tree["tree_cpu_pct"] if tree else None,
                   tree_rss_bytes=tree["tree_rss_bytes"] if tree else None,
                   serve=serve_live(db, int(r["id"])))


def _epoch(iso: str | None) -> float | None:
    """Epoch seconds of a stored ``...Z`` timestamp (None when absent or unreadable)."""
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _pending(db: sqlite_utils.Database, run_ids: list[int]) -> dict[int, str]:
    """Run id → ``pending (<the queue's reason>)`` for the runs of ``run_ids`` whose
    executor still holds them in its queue."""
    return {r["id"]: f"pending ({why})" for r in slurm.queue_state(db, run_ids)
            if (why := queued_reason(r))}


def read_jobs(db: sqlite_utils.Database, campaign_id: int, offset: int, limit: int,
              total_hint: int | None = None) -> tuple[JobLine, ...]:
    """Rows ``offset`` to ``offset + limit`` of the campaign's queue (``total_hint``: its
    rows as last counted, which only picks the end to count from)."""
    rows = queue_view.queue_window(db, campaign_id, offset, limit, total_hint)
    settings = labels.job_settings(db, [int(j["id"]) for j in rows],
                                   labels.campaign_varying(db, campaign_id))
    pending = _pending(db, [j["run_id"] for j in rows if j["run_id"] is not None])
    return tuple(JobLine(j["id"], j["position"], pending.get(j["run_id"], j["status"]),
                         j["framework"], j["model"], j["batch_size"], j["device"], j["repeat"],
                         j["median_s"], bool(j["contaminated"]), settings.get(int(j["id"]), ""))
                 for j in rows)


def read_window(db: sqlite_utils.Database, view: CampaignView, offset: int,
                limit: int) -> CampaignView:
    """``view`` with another window of its queue (the rest as last read): what a
    scroll needs, at a fraction of :func:`read_campaign`'s cost."""
    offset = max(0, min(offset, view.job_total - limit))
    return replace(view, jobs=read_jobs(db, view.campaign.id, offset, limit, view.job_total),
                   jobs_offset=offset)


def read_campaign(db: sqlite_utils.Database, campaign_id: int, offset: int = 0,
                  limit: int = QUEUE_WINDOW, *, log_lines: int = 8) -> CampaignView | None:
    """Everything the main screen shows of a campaign (None if it does not exist).

    Of the queue, rows ``offset`` to ``offset + limit`` (the window the viewer shows)
    and the counts by status.
    """
    c = next(iter(campaigns_by_id(db, [campaign_id])), None)
    if c is None:
        return None
    camp = campaign_row(c)
    counts = status_counts(db, campaign_id)
    total = sum(n for s, n in counts.items() if s != JobStatus.REMOVED)
    offset = max(0, min(offset, total - limit))  # a shrunk queue: its end stays in view
    jobs = read_jobs(db, campaign_id, offset, limit, total)
    head = jobs[:QUEUE_EDGE] if offset == 0 else read_jobs(db, campaign_id, 0, QUEUE_EDGE)
    tail_from = max(0, total - QUEUE_EDGE)
    tail = jobs[tail_from - offset:] if offset + len(jobs) >= total else \
        read_jobs(db, campaign_id, tail_from, QUEUE_EDGE, total)
    alive = engine_alive(c["engine_pid"], c["engine_start_time"], c.get("engine_host"),
                         c.get("engine_heartbeat_s"))
    current = _current(db, campaign_id, log_lines)
    running_row = None if current is None else queue_view.job_row(db, current.job_id)
    progress = {r.job_id: (r.done, r.total) for r in current_runs(db, campaign_id)}
    eta = None  # without an engine running the queue, a time left would promise nothing
    if alive and camp.status in ACTIVE_CAMPAIGN_STATUSES:
        finished, pending = eta_inputs(db, campaign_id, counts)
        # Every run in progress counts: the shown one at its recent pace once it has one,
        # the others (packed, or the shown one before its first iteration) by iterations.
        shown = current.job_id if current is not None and current.eta_s is not None else None
        others = [PendingWork(("",), 1, max(0, total - done), started=True)
                  for job, (done, total) in progress.items() if job != shown]
        eta = campaign_eta(finished, [*pending, *others],
                           current.eta_s if current is not None and shown is not None
                           else None)
    return CampaignView(camp, c.get("control"), c["engine_pid"], alive, counts, jobs,
                        current, progress, c.get("waiting_for"), offset, running_row, head, tail,
                        eta, c["engine_start_time"], c.get("engine_host"),
                        c.get("engine_heartbeat_s"))
