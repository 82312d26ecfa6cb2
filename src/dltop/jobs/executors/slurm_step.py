"""A run as a step of the allocation the engine runs in (``SLURM_JOB_ID`` set: ``salloc``),
and the one interface both Slurm job watches have (:class:`SlurmWatch`).

:mod:`dltop.jobs.executors.slurm` uses it in place of submitting a batch job: ``batch.sh`` runs
here, in its own session, and its ``srun`` is a step of the allocation.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dltop.catalog import RunStatus
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.supervisor import TERM_GRACE_S, terminate_group
from dltop.procs import process_start_time

SRUN_GRACE_S = TERM_GRACE_S * 2
"""srun passes TERM to the step's tasks and ends the step: it gets twice a runner's grace."""

StateHandler = Callable[[dict[str, Any]], None]
"""Receives the runs columns to update: slurm_job_id, slurm_state/slurm_reason, slurm_nodes."""


class SlurmWatch(Protocol):
    """Follows one run's Slurm job to its end: a batch job (:class:`~dltop.jobs.executors.
    slurm.BatchWatch`) or a step of the engine's allocation (:class:`StepWatch`)."""

    job_id: str
    state: str | None
    """Slurm's last state of the job (``RUNNING``, ``COMPLETED``...)."""
    reason: str | None
    exit_code: int | None
    pid: int
    """The local process (a step's ``batch.sh``), 0 for a batch job."""
    nodes: str | None

    async def run(self, timeout_s: float, stop: asyncio.Event,
                  on_state: StateHandler) -> tuple[RunStatus | None, str | None]:
        """Watch to the end; (why dltop ended it, or None; a note when it could not)."""
        ...


class StepWatch:
    """Runs ``batch.sh`` here, inside the allocation ``SLURM_JOB_ID`` (its srun is a step)."""

    def __init__(self, files: SlurmFiles, env: Mapping[str, str], job_id: str) -> None:
        self.job_id, self._files, self._env = job_id, files, env
        self.state: str | None = None
        self.reason: str | None = None
        self.exit_code: int | None = None
        self.pid = 0
        self.nodes: str | None = env.get("SLURM_JOB_NODELIST") or None

    async def run(self, timeout_s: float, stop: asyncio.Event,
                  on_state: StateHandler) -> tuple[RunStatus | None, str | None]:
        log_fd = os.open(self._files.log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/bash", str(self._files.batch_path), stdin=asyncio.subprocess.DEVNULL,
                stdout=log_fd, stderr=log_fd, env=dict(self._env), cwd=self._files.dir,
                start_new_session=True)
        finally:
            os.close(log_fd)
        self.pid = proc.pid
        # Recorded as a local run's are: `dltop run --resume` reaps the step's srun
        # (which ends the step) should this engine die.
        on_state({"slurm_state": "RUNNING", "slurm_reason": None, "pid": proc.pid,
                  "pgid": proc.pid, "proc_start_time": process_start_time(proc.pid),
                  # the allocation's nodes: the step runs on the first `nodes` of them
                  "slurm_nodes": self.nodes})
        reason: RunStatus | None = None
        try:
            waiter = asyncio.create_task(proc.wait())
            stopper = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({waiter, stopper}, timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if waiter not in done:
                reason = RunStatus.CANCELLED if stopper in done else RunStatus.TIMEOUT
                await terminate_group(proc, proc.pid, SRUN_GRACE_S)
        except asyncio.CancelledError:
            await asyncio.shield(terminate_group(proc, proc.pid, SRUN_GRACE_S))
            raise
        self.exit_code = proc.returncode
        self.state = ("CANCELLED" if reason == RunStatus.CANCELLED
                      else "TIMEOUT" if reason == RunStatus.TIMEOUT
                      else "COMPLETED" if proc.returncode == 0 else "FAILED")
        # The step's end as a batch job's is stored: not RUNNING for ever.
        on_state({"slurm_state": self.state})
        return reason, None

