"""Resume a campaign whose engine died: reap its orphans, re-queue, go on.

A campaign that was cancelled (Ctrl-C, SIGTERM at a reboot, ``dltop cancel``) is
resumed too, its cancelled jobs queued again: named by ``--campaign``, or as the latest
campaign of the database; a cancel ends a campaign, not its plan.

Taking over raises the campaign's owner generation: an engine that only looked dead
(frozen past the heartbeat's limit) finds, when it wakes, that every write it tries is
refused, stops its runners and exits 3 (:mod:`dltop.store.fence`).

What is left of each run depends on where it ran: its executor
(:meth:`~dltop.jobs.executors.base.RunExecutor.reap`) says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dltop.errors import UserError
from dltop.jobs.executors.pick import of_stored_run
from dltop.jobs.executors.slurm_group import reap_server_steps
from dltop.jobs.executors.slurm_run import SLURM_BATCH, SlurmStepExecutor
from dltop.jobs.rundir import run_dir, runs_dir_of
from dltop.procs import engine_alive, heartbeat_age, process_start_time, this_host
from dltop.store.read.campaigns import OpenCampaign, campaigns_by_id, recent_campaigns
from dltop.store.read.changes import main_file
from dltop.store.read.jobs import status_counts
from dltop.store.read.slurm import campaign_run_ids
from dltop.store.writer import Store
from dltop.textsafe import counted


@dataclass(frozen=True)
class Resumed:
    """What resuming found and repaired."""

    campaign_id: int
    name: str
    lost_runs: int
    killed_processes: int
    queued: int
    """Jobs left in the queue (the engine reads them from the database as it goes)."""
    pack: bool = False
    cancelled_slurm_jobs: tuple[str, ...] = ()
    """Batch jobs of the lost runs that were still in Slurm, now ``scancel`` ed."""
    warnings: tuple[str, ...] = ()
    """What could not be cleaned up (a job that could not be cancelled)."""
    kept_runs: tuple[int, ...] = ()
    """Runs whose Slurm job had COMPLETED: read from their events file and kept."""
    uncancelled: int = 0
    """Jobs of a cancelled campaign queued again (its interrupted run's among them)."""


def resume(store: Store, campaign_ref: int | None) -> Resumed:
    """Take over an unfinished campaign (the latest one if ``campaign_ref`` is None).

    Raises:
        UserError: no unfinished campaign, its engine is still alive, or another
            process took it over first (nothing was written).
    """
    queue = store.queue
    # A campaign its engine stopped as failed (disk full, a lock held too long) kept its
    # queue: it is taken up again like one whose engine died.
    open_ = sorted(queue.open_campaigns() + queue.failed_campaigns(), key=lambda c: c.id)
    cancelled = {c.id: c for c in queue.cancelled_campaigns()}
    latest = recent_campaigns(store.db, 1)
    if campaign_ref is not None and campaign_ref in cancelled:
        open_.append(cancelled[campaign_ref])
    elif campaign_ref is None and latest and latest[0]["id"] in cancelled:
        open_.append(cancelled[latest[0]["id"]])  # only the latest: not an old one's
    if campaign_ref is not None:
        open_ = [c for c in open_ if c.id == campaign_ref]
        if not open_:
            raise UserError(_not_resumable(store, campaign_ref))
    if not open_:
        raise UserError(_not_resumable(store, None))
    camp = open_[-1]
    if engine_alive(camp.engine_pid, camp.engine_start_time, camp.engine_host,
                    camp.engine_heartbeat_s):
        raise UserError(f"campaign {camp.id} is still being run by dltop ({_engine(camp)}); "
                        "stop it first or let it finish")
    # Claim first, as a compare-and-set on the dead engine's identity and generation: of
    # two processes resuming at once, the loser has written nothing when it is told. The
    # winner's store is fenced on the new generation, and the engine it took over from
    # (dead, or only frozen) can write nothing more (dltop.store.fence).
    if not queue.claim(camp.id, os.getpid(), process_start_time(os.getpid()) or 0.0,
                       (camp.engine_pid, camp.engine_start_time), this_host(),
                       camp.owner_generation):
        raise UserError(f"campaign {camp.id} was just taken over by another dltop process; "
                        "see 'dltop status'")
    uncancelled = (queue.requeue_cancelled_jobs(camp.id) if camp.id in cancelled else 0)
    killed = lost = 0
    scancelled: list[str] = []
    kept: list[int] = []
    warnings: list[str] = []
    for run in queue.running_runs(camp.id):
        got = of_stored_run(run).reap(store, run, os.environ)
        killed += got.killed
        if got.kept:  # its Slurm job COMPLETED: read from its events file, not run again
            kept.append(run.run_id)
            continue
        if got.cancelled is not None:
            scancelled.append(got.cancelled)
        if got.warning is not None:
            warnings.append(got.warning)
        queue.mark_lost_and_requeue(run)
        lost += 1
    # a group's server (its batch job, or its step of an salloc) is no run's: it is
    # recorded in its first run's folder
    runs_dir = runs_dir_of(Path(main_file(store.db)))
    got_steps, left = reap_server_steps(
        (run_dir(runs_dir, run_id) for run_id in campaign_run_ids(
            store.db, camp.id, (SLURM_BATCH.name, SlurmStepExecutor.name))), os.environ)
    killed += got_steps
    warnings += [f"a group's server: {why}; end it yourself" for why in left]
    queue.requeue_running_jobs(camp.id)
    return Resumed(camp.id, camp.name, lost, killed, queue.queued_count(camp.id),
                   queue.packs(camp.id),
                   tuple(scancelled), tuple(warnings), tuple(kept), uncancelled)


def _not_resumable(store: Store, campaign_ref: int | None) -> str:
    """Why there is nothing to resume, with the campaign's status, and the cancelled
    campaign that ``--campaign`` would resume when it is not the latest."""
    rows = campaigns_by_id(store.db, [campaign_ref]) if campaign_ref is not None else \
        recent_campaigns(store.db, 1)
    if not rows:
        return ("no unfinished campaign to resume" if campaign_ref is None
                else f"there is no campaign {campaign_ref} to resume")
    c = rows[0]
    which = f"campaign {c['id']} `{c['name']}`"
    head = (f"nothing to resume: {which} is {c['status']}" if campaign_ref is not None else
            f"no unfinished campaign to resume (the latest, {which}, is {c['status']})")
    if c["status"] == "cancelled":
        head += " with every job run"
    older = [k for k in store.queue.cancelled_campaigns() if k.id != c["id"]]
    if older and campaign_ref is None:
        k = older[-1]
        head += (f"; campaign {k.id} `{k.name}` was cancelled with "
                 f"{counted(status_counts(store.db, k.id).get('cancelled', 0), 'job')} not run: "
                 f"'dltop run --resume --campaign {k.id}' queues them again")
    return head


def _engine(camp: OpenCampaign) -> str:
    """The live engine, as a user on another host can find it."""
    if camp.engine_host is None or camp.engine_host == this_host():
        return f"pid {camp.engine_pid}"
    return (f"pid {camp.engine_pid} on host {camp.engine_host}, heartbeat "
            f"{heartbeat_age(camp.engine_heartbeat_s)}")
