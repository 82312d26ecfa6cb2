"""``dltop run --resume`` asks Slurm before it cancels (docs/cluster.md).

A dead engine's Slurm run is one of three cases, told apart by what Slurm says of its
batch job now:

- still queued or running (``squeue``): nobody follows it any more, so it is
  cancelled and its job queued again (it would hold its nodes beside the new run);
- ``COMPLETED``: the runner finished on its own; its results are in the events file on
  the shared filesystem, which is read as the engine would have read it, and the run
  is kept (``ok`` with its iterations), never run again;
- ended otherwise, or forgotten by the controller (over ``MinJobAge``) where no
  accounting (``sacct``) can say more: the run is lost and its job queued again,
  with nothing to cancel.

Slurm 22.05's ``scancel`` exits 0 for a finished or unknown job, so its exit status
says nothing of what the job was doing: only the job's state does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop.catalog import RunStatus
from dltop.jobs import environment
from dltop.jobs.collector import IterationCollector, run_fields
from dltop.jobs.eventreader import EventReader
from dltop.jobs.executors.slurm import classify
from dltop.jobs.executors.slurm_batch import LIVE_STATES
from dltop.jobs.executors.slurm_files import EVENTS_FILE, RUNNER_EXIT_FILE, SlurmFiles
from dltop.jobs.executors.slurm_query import read_job_env, run_slurm_cmd
from dltop.jobs.supervisor import ChildOutcome
from dltop.profiles.jobspec import JobSpec
from dltop.store.queue import RunProcess
from dltop.store.read.rundetail import run_log
from dltop.store.read.slurm import log_and_spec
from dltop.store.writer import Store


@dataclass(frozen=True)
class JobNow:
    """What Slurm says of a batch job now."""

    state: str | None
    """``RUNNING``, ``COMPLETED``...; None when Slurm no longer knows the job."""
    source: str
    """Who said so: ``squeue``, ``sacct``, or why nobody could."""


def parse_state(out: str) -> str | None:
    """The state of ``squeue -h -t all -j ID -o %T``, or the allocation's of ``sacct -n -X
    -P -j ID -o State`` (``CANCELLED by 0`` is ``CANCELLED``); None: no line."""
    lines = [x.strip() for x in out.splitlines() if x.strip()]
    return lines[0].split()[0] if lines else None


async def job_now(job_id: str, env: Mapping[str, str]) -> JobNow:
    """Ask ``squeue`` (it lists ended jobs for ``MinJobAge``), then ``sacct``."""
    rc, out, _ = await run_slurm_cmd("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T",
                                     env=env, timeout_s=30.0)
    if rc == 0 and (state := parse_state(out)) is not None:
        return JobNow(state, "squeue")
    rc, out, err = await run_slurm_cmd("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State",
                                       env=env, timeout_s=30.0)
    if rc == 0 and (state := parse_state(out)) is not None:
        return JobNow(state, "sacct")
    why = (err or out).strip().splitlines()[:1] or ["no answer"]
    return JobNow(None, f"neither squeue nor sacct knows it (sacct: {why[0]})")


def slurm_job_now(job_id: str, env: Mapping[str, str],
                  run_dir: Path | None = None) -> JobNow:
    """Blocking :func:`job_now` (resume runs before the engine's event loop).

    When Slurm has forgotten the job (over ``MinJobAge``, no accounting), the first
    node's ``runner-exit`` in ``run_dir`` answers: a runner that exited 0 is taken as
    a ``COMPLETED`` job (its events still decide the run's status).
    """
    now = asyncio.run(job_now(job_id, env))
    if now.state is None and run_dir is not None:
        try:
            code = (run_dir / RUNNER_EXIT_FILE).read_text().strip()
        except OSError:
            return now
        if code == "0":
            return JobNow("COMPLETED", f"{RUNNER_EXIT_FILE} (Slurm: {now.source})")
    return now


def run_dir_of(store: Store, run_id: int) -> Path | None:
    """The run's folder (its log's), None when it has none stored."""
    row = run_log(store.db, run_id)
    return Path(row[1]).parent if row and row[1] else None


def is_live(now: JobNow) -> bool:
    return now.state in LIVE_STATES


def adopt_completed(store: Store, run: RunProcess) -> RunStatus | None:
    """Store a COMPLETED job's run from its events file, as the engine would have.

    Iterations and evaluations the dead engine already stored are replaced by the same
    rows (an index stored again replaces its row). The nodes' telemetry after the
    engine died is not ingested (the run's note says so).

    Returns:
        The run's status, or None when the run folder or its spec cannot be read
        (then it is lost and re-run as before).
    """
    row = log_and_spec(store.db, run.run_id)
    if row is None or not row[0]:
        return None
    folder = Path(row[0]).parent
    try:
        job = JobSpec.from_json_dict(json.loads(row[1]))
        data = (folder / EVENTS_FILE).read_bytes()
    except (OSError, ValueError, KeyError, TypeError):
        return None

    def now(fn: Any, *args: Any, **_: Any) -> None:  # the writer is this thread here
        fn(*args)

    collector = IterationCollector(run.run_id, job, lambda _e: None, store, now)
    reader = EventReader(collector.on_event)
    reader.feed(data)
    reader.finish()
    status, kind, message = classify(None, "COMPLETED", None, run.slurm_job_id or "?", 0,
                                     reader, job.timeout_s)
    job_env = read_job_env(SlurmFiles(folder, folder / "spec.json", folder / "runner.log"))
    outcome = collector.short(ChildOutcome(
        status=status, exit_code=0, message=message,
        error_kind=kind, protocol_errors=reader.protocol_errors,
        protocol_note=reader.protocol_note, hello=reader.hello, model=reader.model,
        done=reader.done or {}, job_env=job_env))
    collector.flush(final=True)
    fields = run_fields(outcome, collector)
    fields["wall_s"] = None  # the engine that timed it died: unknown, not 0
    note = (f"kept at resume: Slurm job {run.slurm_job_id} had COMPLETED after its engine "
            "died; telemetry after that is missing")
    fields["note"] = f"{fields['note']}; {note}" if fields.get("note") else note
    fields["slurm_state"] = "COMPLETED"
    store.finish_run(run.run_id, run.job_id, outcome.status, fields)
    if outcome.hello:
        had = job_env or {}
        hello = {**outcome.hello, "job_env": had} if job_env is not None else outcome.hello
        store.record_environment(run.run_id, environment.environment_row(hello, had, job))
    return outcome.status
