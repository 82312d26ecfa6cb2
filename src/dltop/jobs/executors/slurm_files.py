"""The files of a Slurm run's folder (pure; docs/cluster.md): what ``batch.sh`` and
``node.sh`` write there for the engine to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

EVENTS_FILE = "events.jsonl"
BATCH_FILE = "batch.sh"
NODE_FILE = "node.sh"
SETUP_FAILED_FILE = "setup-failed"
"""Written by ``batch.sh`` when a ``setup`` line fails: ``<line number> <exit status>``, then
the file a ``source`` line could not find, if that was it."""
SETUP_DONE_FILE = "setup-done"
"""Written by ``batch.sh`` when its setup lines are done, just before its ``srun``."""
STEP_STARTED_FILE = "step-started"
"""Written by the first task's ``node.sh`` first of all: the step (and its container) ran."""
CONTAINER_FAILED_FILE = "container-failed"
"""Written by ``node.sh`` when ``apptainer exec`` cannot start the image: ``<node> <status>``."""
STEP_SHAPE_FILE = "step-shape"
"""Written by the first task's ``node.sh`` when the step is not the shape asked
(``<tasks> <nodes>``); no runner starts."""

JOB_ENV_FILE = "job-env"
"""Written by the first node's ``node.sh`` just before the runner: ``NAME=value`` lines
of :data:`REPORTED_VARS` as the runner gets them (the environment stored for the run)."""
RUNNER_EXIT_FILE = "runner-exit"
"""Written by the first node's ``node.sh`` when its runner ended: its exit status. What
``--resume`` goes by when Slurm has forgotten the job and keeps no accounting."""
SHARED_NODE_NOTE = "nodes shared with other jobs (slurm.exclusive = false)"
"""The note of a run whose job did not have its nodes to itself."""


class _InDir:
    """A file of the run folder, read as an attribute of :class:`SlurmFiles`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, files: SlurmFiles, owner: type[SlurmFiles]) -> Path:
        return files.dir / self.name


@dataclass(frozen=True)
class SlurmFiles:
    """Where a run's Slurm files go, all inside its run folder."""

    dir: Path
    spec_path: Path
    log_path: Path

    events_path = _InDir(EVENTS_FILE)
    batch_path = _InDir(BATCH_FILE)
    node_path = _InDir(NODE_FILE)
    setup_failed_path = _InDir(SETUP_FAILED_FILE)
    setup_done_path = _InDir(SETUP_DONE_FILE)
    step_started_path = _InDir(STEP_STARTED_FILE)
    container_failed_path = _InDir(CONTAINER_FAILED_FILE)
    step_shape_path = _InDir(STEP_SHAPE_FILE)
    job_env_path = _InDir(JOB_ENV_FILE)
    runner_exit_path = _InDir(RUNNER_EXIT_FILE)
