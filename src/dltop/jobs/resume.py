"""Resume a campaign whose engine died: reap its orphans, re-queue, go on."""

from __future__ import annotations

import os
from dataclasses import dataclass

from dltop.errors import UserError
from dltop.jobs.slurm import cancel_orphan, is_orphan_job
from dltop.jobs.slurm_adopt import adopt_completed, is_live, run_dir_of, slurm_job_now
from dltop.jobs.supervisor import reap_orphan_group
from dltop.procs import engine_alive, process_start_time
from dltop.store.writer import Store


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
    if campaign_ref is not None:
        open_ = [c for c in open_ if c.id == campaign_ref]
        if not open_:
            raise UserError(f"campaign {campaign_ref} is not unfinished (nothing to resume)")
    if not open_:
        raise UserError("no unfinished campaign to resume")
    camp = open_[-1]
    if engine_alive(camp.engine_pid, camp.engine_start_time):
        raise UserError(f"campaign {camp.id} is still being run by dltop (pid "
                        f"{camp.engine_pid}); stop it first or let it finish")
    # Claim first, as a compare-and-set on the dead engine's identity: of two
    # processes resuming at once, the loser has written nothing when it is told.
    if not queue.claim(camp.id, os.getpid(), process_start_time(os.getpid()) or 0.0,
                       (camp.engine_pid, camp.engine_start_time)):
        raise UserError(f"campaign {camp.id} was just taken over by another dltop process; "
                        "see 'dltop status'")
    killed = lost = 0
    cancelled: list[str] = []
    kept: list[int] = []
    warnings: list[str] = []
    for run in queue.running_runs(camp.id):
        killed += reap_orphan_group(run.pid, run.pgid, run.proc_start_time)
        if run.slurm_job_id and is_orphan_job(run.pid, run.slurm_job_id, run.slurm_state):
            # Asked first: scancel exits 0 for a finished or unknown job too, and a
            # COMPLETED job's results are on the shared filesystem, not to be thrown away.
            now = slurm_job_now(run.slurm_job_id, os.environ, run_dir_of(store, run.run_id))
            if now.state == "COMPLETED" and adopt_completed(store, run) is not None:
                kept.append(run.run_id)
                continue
            if is_live(now):
                # The batch job outlived its engine: it would hold its nodes (and train
                # on) beside the run that replaces it.
                why = cancel_orphan(run.slurm_job_id, os.environ)
                if why is None:
                    cancelled.append(run.slurm_job_id)
                else:
                    warnings.append(f"run {run.run_id}: {why}; cancel Slurm job "
                                    f"{run.slurm_job_id} yourself")
            elif now.state is None:
                warnings.append(f"run {run.run_id}: Slurm job {run.slurm_job_id}: "
                                f"{now.source}; its run is re-run")
        queue.mark_lost_and_requeue(run)
        lost += 1
    queue.requeue_running_jobs(camp.id)
    return Resumed(camp.id, camp.name, lost, killed, queue.queued_count(camp.id),
                   queue.packs(camp.id),
                   tuple(cancelled), tuple(warnings), tuple(kept))
