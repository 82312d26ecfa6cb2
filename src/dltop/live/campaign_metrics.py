"""Prometheus families of campaigns: their state, their jobs, what they wait for, their
last finished run.

Headless (no Textual, no Rich). Read per scrape from the database by
:class:`dltop.live.exporter.MetricsSource`, as :mod:`dltop.live.metrics` reads the runs
in progress. The campaigns reported are the open ones (queued, running, paused,
waiting) and the newest campaign, so a campaign that just ended still shows how it
ended instead of vanishing with its last run.

Per-run series of :mod:`dltop.live.metrics` end with the run (a finished run has no
pace). What outlives it is chosen here: the campaign's **last finished run** with its
final values (``dltop_campaign_last_run_*``, labelled by the campaign only: its id,
status and identity are ``dltop_campaign_last_run_info``'s, joined by
``on (Hostname, campaign_id)``, so a campaign's runs do not each leave series), and the
campaign's runs and jobs counted by status (``dltop_campaign_runs``,
``dltop_campaign_jobs``), which only grow while the campaign runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dltop.catalog import (
    ENDED_CAMPAIGN_STATUSES,
    RESULT_STATUSES,
    CampaignStatus,
    Control,
    JobStatus,
    RunStatus,
    control_of,
)
from dltop.live.metrics import Family, Labels, family
from dltop.procs import engine_alive
from dltop.results import identity, idread
from dltop.results.queries import campaigns
from dltop.store.read.campaigns import campaigns_by_id, open_campaigns
from dltop.store.read.jobs import status_counts
from dltop.store.read.queue_view import ended_run_counts, identity_marks, last_ended_run

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import
    import sqlite_utils

JOB_STATES = (JobStatus.QUEUED, JobStatus.RUNNING,
              *(s for s in RunStatus if s != RunStatus.RUNNING), JobStatus.REMOVED)
"""Every state a job can be in (a finished job takes its run's status), each exported,
0 included, so a dashboard's stacked series never has holes."""
_LABEL_NAME = re.compile(r"[^a-zA-Z0-9_]")
RESERVED = frozenset({"campaign", "campaign_id", "framework", "model", "batch", "device",
                      "run_id", "slot", "Hostname", "status", "state", "devices", "control",
                      "le", "quantile"})
"""Label names the families already use (``le``: a histogram's buckets, ``dltop_serve_*``
carry the run labels): an identity field of one of these names gets a ``id_`` prefix
rather than overwriting them."""


def label_name(name: str) -> str:
    """An identity field as a Prometheus label name (``seq_len``; ``id_device``...)."""
    clean = _LABEL_NAME.sub("_", name)
    # a leading digit is not a label name, and a leading "__" is Prometheus's own
    return f"id_{clean}" if clean in RESERVED or clean[:1].isdigit() \
        or clean.startswith("__") else clean


def identity_labels(db: sqlite_utils.Database, campaign_id: int) -> dict[int, dict[str, str]]:
    """Job id → the labels of the identity fields that vary in its campaign (precision,
    mode, compile, seq_len...: model, framework, batch and device are labels anyway)."""
    idents = idread.campaign_identities(db, campaign_id)
    var = identity.variation(idents.values())
    return {job: {label_name(f): text for f, text in zip(var.fields, var.texts(ident),
                                                         strict=True)}
            for job, ident in idents.items()}


@dataclass(frozen=True)
class LastRun:
    """A campaign's newest run that ended, with its final values."""

    run_id: int
    status: str
    framework: str
    model: str
    batch_size: int
    device: str
    median_s: float | None
    samples_per_s: float | None
    """Total samples / total measured seconds (docs/metrics.md), None unless its status is a
    result (ok, short)."""
    extra: Mapping[str, str] = field(default_factory=dict)
    """Its varying identity fields' labels."""


@dataclass(frozen=True)
class CampaignMetrics:
    """One campaign as the exporter reports it."""

    campaign_id: int
    name: str
    status: str
    engine_up: bool
    """Its engine is alive (an open campaign whose engine died waits for --resume)."""
    waiting: bool
    """Its status is ``waiting`` (for devices other processes hold)."""
    jobs: Mapping[str, int]
    runs: Mapping[str, int]
    """Runs that ended, by status (retries count each attempt)."""
    last_run: LastRun | None
    control: Control | None = None
    """The standing request left for its engine (``pause`` while pausing and paused)."""
    waiting_devices: str | None = None
    """While waiting: the devices it wants (``gpu 0-1``). Never who holds them: the
    stored ``waiting_for`` text names their pid, user and database, which a scrape
    (no authentication, maybe on a network address) must not disclose."""
    waiting_since_s: float | None = None
    """While waiting: since when, epoch seconds."""
    waiting_holders: int | None = None
    """While waiting: how many other processes hold those devices or wait ahead."""

    def labels(self, hostname: str) -> dict[str, str]:
        """The campaign's label set."""
        return {"campaign": self.name, "campaign_id": str(self.campaign_id),
                "Hostname": hostname}


LabelCache = dict[int, tuple[tuple[Any, ...], dict[int, dict[str, str]]]]
"""Campaign id → (what its identities were read at, :func:`identity_labels`)."""


def read_campaigns(db: sqlite_utils.Database,
                   labels: dict[int, dict[int, dict[str, str]]] | None = None,
                   cache: LabelCache | None = None) -> list[CampaignMetrics]:
    """The open campaigns and the newest one, oldest first.

    ``labels`` (campaign id → :func:`identity_labels`) is filled for the campaigns read,
    so the caller can label their runs in progress alike. ``cache`` keeps them between
    scrapes (parsing every job's spec costs ~0.3 ms a job), read again only when the
    campaign's jobs or ended runs changed.
    """
    labels = {} if labels is None else labels
    rows: dict[int, Any] = {c.id: c for c in open_campaigns(db)}
    newest = campaigns(db, limit=1)
    if newest and newest[0].id not in rows:
        rows[newest[0].id] = newest[0]
    if cache is not None:
        for gone in set(cache) - set(rows):
            del cache[gone]
    controls = {r["id"]: control_of(r.get("control"))
                for r in campaigns_by_id(db, sorted(rows))}
    out = []
    for cid in sorted(rows):
        c = rows[cid]
        if cache is None:
            per_job = labels.setdefault(cid, identity_labels(db, cid))
        else:
            at = identity_marks(db, cid)
            if cid not in cache or cache[cid][0] != at:
                cache[cid] = (at, identity_labels(db, cid))
            per_job = labels.setdefault(cid, cache[cid][1])
        jobs = status_counts(db, cid)
        runs = ended_run_counts(db, cid)
        last = None
        if (r := last_ended_run(db, cid)) is not None:
            # a stopped run's median (cancelled, timed out, crashed) is a partial one, not
            # its result: shown as the queue and 'dltop runs' show it (catalog's rule)
            ok = r["status"] in RESULT_STATUSES
            rate = (r["samples_per_iter"] / r["mean_s"] if r["samples_per_iter"]
                    and r["mean_s"] else r["samples_per_s"]) if ok else None
            last = LastRun(r["id"], r["status"], r["framework"], r["model"],
                           r["batch_size"], r["device"], r["median_s"] if ok else None,
                           rate, per_job.get(r["job_id"], {}))
        alive = engine_alive(getattr(c, "engine_pid", None),
                             getattr(c, "engine_start_time", None),
                             getattr(c, "engine_host", None),
                             getattr(c, "engine_heartbeat_s", None))
        waiting = c.status == CampaignStatus.WAITING
        out.append(CampaignMetrics(
            cid, c.name, c.status, alive and c.status not in ENDED_CAMPAIGN_STATUSES,
            waiting, jobs, runs, last,
            # an ended campaign's last request ('cancel') stands for no engine any more
            None if c.status in ENDED_CAMPAIGN_STATUSES else controls.get(cid),
            *((getattr(c, "waiting_devices", None), getattr(c, "waiting_since_s", None),
               getattr(c, "waiting_holders", None)) if waiting else ())))
    return out


def campaign_families(camps: Sequence[CampaignMetrics], hostname: str) -> list[Family]:
    """``dltop_campaign_*`` of each campaign read."""
    def per(c: CampaignMetrics, **more: str) -> Labels:
        return {**c.labels(hostname), **more}

    def last_labels(c: CampaignMetrics) -> Labels:
        r = c.last_run
        assert r is not None
        return per(c, run_id=str(r.run_id), status=r.status, framework=r.framework,
                   model=r.model, batch=str(r.batch_size), device=r.device, **r.extra)

    ended = [c for c in camps if c.last_run is not None]
    return [
        family("dltop_campaign_state", "gauge", "1 for the campaign's state (queued, "
               "running, paused, waiting, finished, cancelled, failed), 0 for the others.",
               [(per(c, state=str(s)), 1 if c.status == s else 0)
                for c in camps for s in CampaignStatus]),
        family("dltop_campaign_control", "gauge", "1 for the request standing for the "
               "campaign's engine (pause, resume, cancel; none: all 0): pause with state "
               "running is pausing after the runs going on.",
               [(per(c, control=str(k)), 1 if c.control is k else 0)
                for c in camps for k in Control]),
        family("dltop_campaign_engine_up", "gauge", "1 while the campaign's engine process "
               "is alive (0: ended, or died: 'dltop run --resume' continues it).",
               [(per(c), 1 if c.engine_up else 0) for c in camps]),
        family("dltop_campaign_waiting_for_devices", "gauge", "1 while the campaign waits "
               "for devices other processes hold (label devices: which), else 0.",
               [(per(c, devices=c.waiting_devices or ""), 1 if c.waiting else 0)
                for c in camps]),
        family("dltop_campaign_waiting_start_time_seconds", "gauge", "When the campaign "
               "started waiting for devices (Unix time; absent while it does not wait).",
               [(per(c), c.waiting_since_s) for c in camps if c.waiting]),
        family("dltop_campaign_waiting_holders", "gauge", "Other processes the waiting "
               "campaign waits on: those ahead of it in line for its devices, else the one "
               "holding the device it found busy (who they are: dltop status, locally).",
               [(per(c), c.waiting_holders) for c in camps if c.waiting]),
        family("dltop_campaign_jobs", "gauge", "The campaign's jobs by state: queued, "
               "running, removed, or the status of the job's last run (ok, oom, crashed...).",
               [(per(c, state=str(s)), c.jobs.get(s, 0)) for c in camps for s in JOB_STATES]),
        family("dltop_campaign_runs", "gauge", "Runs of the campaign that ended, by status "
               "(retried jobs count each attempt).",
               [(per(c, status=str(s)), c.runs.get(s, 0)) for c in camps
                for s in RunStatus if s != RunStatus.RUNNING]),
        family("dltop_campaign_last_run_info", "gauge", "1, labelled with the campaign's "
               "newest ended run: its id, status and identity.",
               [(last_labels(c), 1) for c in ended]),
        family("dltop_campaign_last_run_seconds_per_iteration", "gauge", "Median seconds "
               "per measured iteration of the newest ended run (ok and short runs only: "
               "a stopped run's is partial); which run: dltop_campaign_last_run_info.",
               [(per(c), c.last_run.median_s if c.last_run else None) for c in ended]),
        family("dltop_campaign_last_run_samples_per_second", "gauge", "Total samples / total "
               "measured seconds of the newest ended run (ok and short runs only).",
               [(per(c), c.last_run.samples_per_s if c.last_run else None) for c in ended]),
    ]
