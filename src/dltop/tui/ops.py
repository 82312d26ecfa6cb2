"""Blocking operations behind the TUI's keys; the app runs each in a worker thread.

Each opens its own connection (SQLite objects stay in the thread that made
them) and writes only through :mod:`dltop.store`.
"""

from __future__ import annotations

from pathlib import Path

from dltop.catalog import Control
from dltop.errors import DltopError
from dltop.jobs.start import EngineDidNotStart, StartOptions, check, start_campaign
from dltop.live.campaign import CampaignView
from dltop.results.export import export_to_file
from dltop.store import Store, connect


def _store(db_path: Path) -> Store:
    return Store(connect(db_path, create=False))


def _start(refs: list[str], db_path: Path, logs_dir: Path, resume: int | None = None) -> int:
    """Start a background engine through the door; its pid, or EngineDidNotStart."""
    more = [] if resume is None else ["--resume", "--campaign", str(resume)]
    launch = start_campaign(refs, db_path, StartOptions(
        ("dltop", "run", *refs, *more), detach=True, resume=bool(more), campaign_id=resume,
        logs_dir=logs_dir)).launch
    assert launch is not None  # detached
    if launch.exit_code:  # 0: a short campaign that already finished, as dltop run says
        raise EngineDidNotStart(f"the engine did not start: {launch.log_tail.strip()[-300:]}")
    return launch.pid


def ensure_engine(db_path: Path, logs_dir: Path, campaign_id: int, alive: bool) -> str:
    """Start an engine that resumes the campaign unless one already runs it."""
    return "" if alive else f"; engine started (pid {_start([], db_path, logs_dir, campaign_id)})"


def resume_orphans(db_path: Path, logs_dir: Path) -> list[str]:
    """Start an engine for every unfinished campaign whose engine is gone."""
    from dltop.procs import engine_alive

    if not db_path.is_file():
        return []  # no database yet: no campaign to resume
    out = []
    for c in _store(db_path).queue.open_campaigns():
        if engine_alive(c.engine_pid, c.engine_start_time, c.engine_host,
                        c.engine_heartbeat_s):
            continue
        try:
            extra = ensure_engine(db_path, logs_dir, c.id, alive=False)
        except DltopError as exc:
            out.append(f"campaign {c.id} could not be resumed: {exc}")
            continue
        out.append(f"campaign {c.id} had lost its engine: resumed{extra}")
    return out


def add_profile(db_path: Path, logs_dir: Path, ref: str, view: CampaignView | None) -> str:
    """Queue a profile: appended to the running campaign, or a new campaign's engine.

    The running campaign is the one whose engine is alive, whichever campaign
    the viewer shows (an older one, from the history): a second engine would
    only wait for the first one's devices.
    """
    from dltop.procs import engine_alive

    target = view.campaign.id if view is not None and view.active else None
    if target is None:
        running = [c.id for c in _store(db_path).queue.open_campaigns()
                   if engine_alive(c.engine_pid, c.engine_start_time, c.engine_host,
                                   c.engine_heartbeat_s)]
        target = running[-1] if running else None
    if target is not None:
        plan = check([ref], StartOptions(("dltop", "run", ref)))
        res = _store(db_path).edits.append_jobs(target, plan.jobs, ref)
        extra = ensure_engine(db_path, logs_dir, target, not res.needs_engine)
        return f"{res.changed} job(s) of {ref} added to campaign {target}{extra}"
    return f"{ref}: new campaign, engine pid {_start([ref], db_path, logs_dir)}"


def retry_failed(db_path: Path, logs_dir: Path, view: CampaignView) -> str:
    """Queue the campaign's failed jobs again, starting an engine if none runs it."""
    res = _store(db_path).edits.retry_failed(view.campaign.id)
    if not res.changed:
        return "no failed jobs to retry"
    extra = ensure_engine(db_path, logs_dir, view.campaign.id,
                          view.engine_alive and not res.needs_engine)
    return f"{res.changed} job(s) queued again{extra}"


def move(db_path: Path, job_id: int, delta: int) -> str:
    """Move a queued job up (-1) or down (+1); "" when it moved (the queue shows it)."""
    res = _store(db_path).edits.move_job(job_id, delta)
    return "" if res.changed else "only queued jobs move, within the queue"


def remove(db_path: Path, job_id: int) -> str:
    """Take a queued job out of the queue."""
    res = _store(db_path).edits.remove_job(job_id)
    return "removed from the queue" if res.changed else "only a queued job can be removed"


def cancel_run(db_path: Path, campaign_id: int, run_id: int) -> str:
    """Ask the engine to cancel run ``run_id`` (only that run; the queue goes on)."""
    if not _store(db_path).edits.cancel_run(campaign_id, run_id).changed:
        return f"run {run_id} had already ended: nothing cancelled"
    return f"cancelling run {run_id}"


def set_control(db_path: Path, view: CampaignView, control: Control) -> str:
    """Pause, resume or cancel the campaign's engine."""
    if not view.engine_alive:
        return "no engine runs this campaign"
    _store(db_path).set_control(view.campaign.id, control)
    return {Control.PAUSE: "pause requested", Control.RESUME: "resume requested",
            Control.CANCEL: "stop requested"}[control]


def export(db_path: Path, campaign_id: int, path: str, metric: str) -> str:
    """Write the campaign's table to ``path`` in the format its suffix names: the pivot
    of ``metric``, or the slo table where the results screen shows it."""
    if metric in ("slo", "overhead"):  # results_view.TABLES (not imported: Rich, a worker)
        return export_to_file(connect(db_path, create=False), campaign_id, path, table=metric)
    return export_to_file(connect(db_path, create=False), campaign_id, path, metric=metric)
