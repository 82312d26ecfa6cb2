"""Whether a job's devices are this host's: the one test of ``JobSpec.executor``.

Light on purpose (preflight, which a viewer runs when a profile is added, imports it):
no executor, supervisor or sampler is loaded.
"""

from __future__ import annotations

import shutil

from dltop.profiles.model import JobSpec

SBATCH_MISSING = ('executor = "slurm" needs Slurm\'s sbatch on PATH, and none was found: run '
                  "dltop on the cluster's login node (docs/cluster.md), or install the Slurm "
                  "client (apt-get install slurm-client; slurm-wlm munge for a whole cluster)")


def on_this_host(job: JobSpec) -> bool:
    """True when ``job`` runs on this host's devices (allocated, pinned, leased, cooled
    down, checked against its GPUs); False for a Slurm job, whose devices are the
    compute nodes'."""
    return job.executor != "slurm"


def launch_problem(job: JobSpec) -> str | None:
    """Why ``job``'s runs cannot be started from this host (a Slurm job without
    ``sbatch``), or None."""
    if not on_this_host(job) and shutil.which("sbatch") is None:
        return SBATCH_MISSING
    return None
