"""From validated profiles to a stored campaign: preflight, then queue.

Preflight checks what the host can satisfy (a runner and interpreter for each
framework, enough GPUs, real-data directories, GPUs a CNTK job can use) before
anything is written.
By default an unsatisfiable job is an error (exit 2, database untouched); with
``skip_unavailable`` such jobs are stored with status ``unsatisfiable`` and the
reason, and appear as ``n/a`` in exports.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dltop import catalog
from dltop.catalog import JobStatus, RunStatus
from dltop.errors import UserError
from dltop.jobs.environment import core_order
from dltop.jobs.executors import slurm_partition, where
from dltop.jobs.queued import QueuedJob
from dltop.procs import process_start_time, this_host
from dltop.profiles import fp8, limits, lm
from dltop.profiles.joblist import JobList
from dltop.profiles.jobspec import JobSpec, Profile
from dltop.runners import command, registry
from dltop.store.writer import Store
from dltop.telemetry import nvml
from dltop.telemetry.host import host_facts


@dataclass(frozen=True)
class Plan:
    """Jobs to queue, each with ``None`` (runnable) or the reason it cannot run here."""

    name: str
    profiles: tuple[str, ...]
    jobs: Sequence[JobSpec]
    """Every job, a :class:`~dltop.profiles.joblist.JobList` (made per job when read)."""
    problems: tuple[str | None, ...]
    warnings: tuple[str, ...] = ()
    pack: bool = False
    """Run jobs at once on disjoint devices (``--pack``, or every profile says so)."""


def preflight(profiles: Sequence[Profile], gpu_count: int, skip_unavailable: bool,
              pack: bool = False) -> Plan:
    """Check every job against this host.

    The campaign packs runs onto disjoint devices when ``pack`` is true or when
    every profile in it asks for packing (one profile wanting clean one-at-a-time
    numbers keeps the whole campaign sequential).

    Raises:
        UserError: some job cannot run here and ``skip_unavailable`` is false.
    """
    jobs = JobList.concat(p.jobs for p in profiles)
    most = limits.max_jobs()
    if len(jobs) > most:  # each profile is within it; together they may not be
        raise UserError(f"{' + '.join(p.source for p in profiles)}: the campaign holds "
                        f"{limits.too_many_jobs(len(jobs), most)}")
    runner_problem: dict[str, str | None] = {}
    problems: list[str | None] = []
    launches: list[command.Launch] = []  # command jobs' programs, resolved once each
    capabilities = _Capabilities(gpu_count)
    partitions = _Partitions()
    configs = [job for block, _ in jobs.blocks for job in block]
    sources = [p.source for p in profiles for _ in JobList.concat([p.jobs]).blocks]
    # A repeat differs from its configuration only in its index: checked once per
    # configuration, its answer holds for every repeat.
    sourced: dict[str, str] = {}  # a reason → the profile it was first found in
    for (block, passes), source in zip(jobs.blocks, sources, strict=True):
        answers: list[str | None] = []
        for job in block:
            if job.framework not in runner_problem:
                try:
                    registry.resolve(job.framework)
                    runner_problem[job.framework] = None
                except UserError as exc:
                    runner_problem[job.framework] = str(exc)
            launch_problem = None
            if catalog.capabilities(job.framework).program:
                try:
                    launches.append(command.launch(job))
                except UserError as exc:
                    launch_problem = str(exc)
            answers.append(cntk_gpu_problem(job, gpu_count, capabilities)
                           or fp8_gpu_problem(job, gpu_count, capabilities)
                           or _problem(job, gpu_count, runner_problem[job.framework])
                           or launch_problem or partitions.problem(job, source))
        problems.extend(answers * passes)
        for answer in answers:
            if answer is not None:
                sourced.setdefault(answer, source)
    bad = [p for p in problems if p is not None]
    if bad and not skip_unavailable:
        reasons = sorted(set(bad))
        shown = "\n  ".join(f"{sourced[r]}: {r}" for r in reasons[:8])
        raise UserError(
            f"{len(bad)} of {len(jobs)} jobs cannot run on this host:\n  {shown}\n"
            "Fix the profile, or pass --skip-unavailable to record them as 'unsatisfiable'."
        )
    name = "+".join(p.name for p in profiles)
    return Plan(name, tuple(p.name for p in profiles), jobs, tuple(problems),
                _warnings(configs, launches),
                pack or (bool(profiles) and all(p.pack for p in profiles)))


def _warnings(jobs: Sequence[JobSpec], launches: Sequence[command.Launch]) -> tuple[str, ...]:
    physical = host_facts()["physical_cores"] or 0
    logical = len(core_order())
    out = {f"command: {note}" for launch in launches for note in launch.notes}
    for job in jobs:
        if job.device.kind == "gpu" or not where.on_this_host(job):
            continue
        if job.device.count > logical:
            out.add(f"{job.device.label}: more than the {logical} CPUs available; "
                    "the run is not pinned and its threads share cores")
        elif physical and job.device.count > physical:
            out.add(f"{job.device.label}: more than the {physical} physical cores; "
                    "threads share cores through SMT")
    return tuple(sorted(out))


class _Capabilities:
    """Compute capability of each GPU of this host, read from NVML once when first asked."""

    def __init__(self, gpu_count: int) -> None:
        self._count = gpu_count
        self._caps: list[tuple[int, int] | None] | None = None

    def get(self) -> list[tuple[int, int] | None]:
        if self._caps is None:
            self._caps = [nvml.compute_capability(i) for i in range(self._count)]
        return self._caps


class _Partitions:
    """The Slurm partitions' nodes, asked of ``sinfo`` once, when a Slurm job first needs
    them (:mod:`dltop.jobs.executors.slurm_partition`)."""

    def __init__(self) -> None:
        self._asked = False
        self._partitions: slurm_partition.Partitions | None = None

    def problem(self, job: JobSpec, source: str) -> str | None:
        """Why ``job`` (a Slurm job) fits no node of its partition, or None."""
        if where.on_this_host(job):
            return None
        if not self._asked:
            self._asked = True
            self._partitions = slurm_partition.query_partitions(os.environ)
        if self._partitions is None:
            return None
        return slurm_partition.partition_problem(job, self._partitions, source)


def cntk_gpu_problem(job: JobSpec, gpu_count: int, capabilities: _Capabilities) -> str | None:
    """Why a ``gpu:N`` CNTK job cannot run on this host's GPUs, or None.

    It needs N GPUs below its ``gpu_below`` (CUDA 10, cuDNN 7: docs/frameworks.md); a GPU
    whose capability NVML cannot tell counts as usable (the run says if it is not).
    Too few GPUs at all is the GPU count check's to say.
    """
    below = catalog.capabilities(job.framework).gpu_below
    if (below is None or job.device.kind != "gpu" or job.device.count > gpu_count
            or not where.on_this_host(job)):  # a Slurm job's: the nodes'
        return None
    caps = capabilities.get()
    usable = [c for c in caps if c is None or c < below]
    if len(usable) >= job.device.count:
        return None
    found = ", ".join(sorted({f"{c[0]}.{c[1]}" for c in caps if c is not None}))
    return (f"{job.device.label} with CNTK: CNTK 2.7's GPU build needs CUDA 10, which "
            f"cannot run on compute capability 8.0 or later (A100, H100, H200); this host's "
            f"GPUs are compute capability {found} (run CNTK on cpu:N; docs/frameworks.md)")


def fp8_gpu_problem(job: JobSpec, gpu_count: int, capabilities: _Capabilities) -> str | None:
    """Why a ``precision = "fp8"`` job cannot run on this host's GPUs, or None: it needs
    N GPUs of compute capability 8.9 or later (:data:`dltop.profiles.fp8.MIN_CAPABILITY`,
    NVML's figure; a GPU NVML cannot tell counts as able). Too few GPUs at all is the
    GPU count check's to say; a Slurm job's GPUs are its nodes' (the run says)."""
    if (job.precision != fp8.FP8 or job.device.kind != "gpu"
            or job.device.count > gpu_count or not where.on_this_host(job)):
        return None
    return fp8.capability_problem(job.device.label, capabilities.get(), job.device.count)


def _problem(job: JobSpec, gpu_count: int, runner_problem: str | None) -> str | None:
    if runner_problem is not None:
        return runner_problem
    if not where.on_this_host(job):
        # The devices are the compute nodes', not this (login) host's: no GPU or mpiexec check.
        return where.launch_problem(job) or _data_problem(job)
    if job.device.kind == "gpu" and job.device.count > gpu_count:
        return (f"{job.device.label} needs {job.device.count} GPU(s); "
                f"this host has {gpu_count}")
    if (data := _data_problem(job)) is not None:
        return data
    if catalog.capabilities(job.framework).launcher == "mpiexec" and job.device.workers > 1 \
            and shutil.which("mpiexec") is None:
        return (f"{job.device.label} with CNTK needs mpiexec (Open MPI) on PATH for its "
                "data-parallel workers: apt-get install openmpi-bin, or run "
                "'dltop env setup cntk'")
    return None


def _data_problem(job: JobSpec) -> str | None:
    if job.data == "real" and job.data_dir and job.model in catalog.TRANSFORMER_MODELS:
        # a text file or a directory of PTB texts, read byte-level (docs/data.md): its
        # text is checked now, so a binary or short file stores nothing
        why = lm.text_problem(job.data_dir, int(job.seq_len or lm.shape(job.model)["seq_len"]),
                              job.samples_per_iter)
        return None if why is None else f"data_dir {why}"
    if job.data == "real" and job.data_dir and not Path(job.data_dir).is_dir():
        if Path(job.data_dir).exists():
            return f"data_dir {job.data_dir} is a file, not a directory"
        return f"data_dir {job.data_dir} does not exist"
    return None


def create(store: Store, plan: Plan, argv: Sequence[str]) -> tuple[int, list[QueuedJob]]:
    """Store the campaign and its jobs; return the campaign id and the runnable jobs.

    For a small plan (tests, a viewer's demo campaign): the list holds every queued
    job. ``dltop run`` calls :func:`store_plan`, and the engine reads the queue
    from the database.
    """
    campaign_id = store_plan(store, plan, argv)
    return campaign_id, [QueuedJob(job_id, pos, spec)
                         for job_id, pos, spec in store.queue.queued_jobs(campaign_id)]


def store_plan(store: Store, plan: Plan, argv: Sequence[str]) -> int:
    """Store the campaign and its jobs in one transaction; return the campaign id.

    The jobs go in as one bulk insert (rows made per configuration), so queueing
    100 000 jobs holds no per-job object and costs SQLite's work on the rows (~2 s);
    a job that cannot run here gets its ``unsatisfiable`` run with the reason. Each
    distinct stored spec is decoded as the engine and ``--resume`` decode it before
    the transaction commits (:func:`dltop.store.templates.read_back`).

    Raises:
        UserError: a stored spec does not read back; nothing is stored.
    """
    # all or nothing: no campaign stored without its jobs; the log's copy into the
    # database file waits for the engine's checkpoint after a run, not the first run
    with store.checkpoint_later(), store.transaction():
        campaign_id = store.create_campaign(plan.name, plan.profiles, argv,
                                            this_host(), os.getpid(),
                                            process_start_time(os.getpid()), pack=plan.pack)
        unsatisfiable = [k for k, p in enumerate(plan.problems) if p is not None]
        statuses = None if not unsatisfiable else [
            JobStatus.QUEUED if p is None else RunStatus.UNSATISFIABLE for p in plan.problems]
        ids = store.add_jobs(campaign_id, plan.jobs, statuses)
        for k in unsatisfiable:
            job = plan.jobs[k]
            run_id = store.start_run(ids[k], campaign_id, 1, "", job.units_per_iter)
            store.finish_run(run_id, ids[k], RunStatus.UNSATISFIABLE,
                             {"error_message": plan.problems[k]})
    return campaign_id
