"""Whether a job's devices are this host's (the one test of ``JobSpec.executor``), and
whether a stored run's executor still holds it in a queue (what viewers show of it):
what the executor's class declares (``devices_here``, ``queues``), read off the registry.

Light on purpose (preflight, which a viewer runs when a profile is added, imports it):
an executor's module is loaded only when its declaration is asked.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from dltop.errors import UserError
from dltop.jobs.executors.pick import executor_class
from dltop.profiles.jobspec import JobSpec

SBATCH_MISSING = ('executor = "slurm" needs Slurm\'s sbatch on PATH, and none was found: run '
                  "dltop on the cluster's login node (docs/cluster.md), or install the Slurm "
                  "client (apt-get install slurm-client; slurm-wlm munge for a whole cluster)")


def on_this_host(job: JobSpec) -> bool:
    """True when ``job`` runs on this host's devices (allocated, pinned, leased, cooled
    down, checked against its GPUs); False for a Slurm job, whose devices are the
    compute nodes': as its executor declares (``devices_here``)."""
    return executor_class(job.executor).devices_here


def queues(executor: str) -> bool:
    """Whether the runs of the executor named ``executor`` can wait in a queue before they
    start (it declares ``queues``); False for a name no longer registered."""
    try:
        return executor_class(executor).queues
    except UserError:
        return False


def queued_reason(run: Mapping[str, Any], unseen: bool = False, none: str = "-") -> str | None:
    """Why a run's executor, by the name the run stores, still holds it in its queue
    (``run``: :func:`dltop.store.schema_slurm.queue_columns_sql`'s columns): a Slurm
    job PENDING (``unseen``: or not yet seen), squeue's reason or ``none``; else None."""
    state = run["slurm_state"]
    # the executor asked last: its class is loaded only for a run that may be queued
    if run["slurm_job_id"] is not None and (state == "PENDING" or (unseen and state is None)) \
            and queues(run["executor"]):
        return run["slurm_reason"] or none
    return None


def launch_problem(job: JobSpec) -> str | None:
    """Why ``job``'s runs cannot be started from this host (a Slurm job without
    ``sbatch``), or None."""
    if not on_this_host(job) and shutil.which("sbatch") is None:
        return SBATCH_MISSING
    return None
