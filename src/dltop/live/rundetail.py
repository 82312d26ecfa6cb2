"""One run as its detail view shows it: status and reason, statistics, telemetry, environment.

Read off the event loop by the TUI's run detail screen, and meant for the report too:
plain queries by primary key or ``runs(job_id)``, frozen dataclasses, no Textual or
Rich. The run's series over time are :mod:`dltop.results.runtrace`'s; a running run's
trace grows with :func:`extend_trace`, which reads only the rows stored since.

A value the run does not have is ``None``; :meth:`RunDetail.why_missing` says why
(a CPU job has no GPU figures, a run with no measured iteration has no telemetry
window, ...), so a viewer shows ``N/A`` with the reason instead of a blank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop.catalog import SERVE_FRAMEWORKS, RunStatus
from dltop.live.campaign import read_log_tail
from dltop.live.nodegpus import NodeGpu, node_gpus, slurm_acct_text
from dltop.results import generation as gen
from dltop.results import labels
from dltop.results.gpufacts import GPU_FACTS_KEY, gpu_facts_texts
from dltop.results.profile import ProfileOp, profile_ops
from dltop.results.runtrace import (
    DEFAULT_MAX_POINTS,
    GpuPoint,
    GpuSeries,
    HostPoint,
    IterPoint,
    RunTrace,
    read_trace,
)
from dltop.results.servetrace import ServeTrace, serve_trace
from dltop.results.serving import serve_requests_of
from dltop.store import samples
from dltop.store.read import rundetail as run_rows
from dltop.store.read import runs
from dltop.telemetry.readings import HINT, SERVE_HINT, gpu_shortfall, host_shortfall
from dltop.telemetry.values import RunTelemetry
from dltop.telemetry.values import opt_float as _f

if TYPE_CHECKING:
    from dltop.store.reader import Db

ENV_FIELDS = ("host", "os", "cpu_model", "physical_cores", "logical_cores", "python_version",
              "python_executable", "framework", "framework_version", "blas", "threads",
              "thread_env", "cuda_version", "cudnn_version", "device_name", "driver_version",
              "extra")
"""The ``environment`` columns shown, in order."""


@dataclass(frozen=True)
class RunStats:
    """The run's timing statistics over its measured iterations (``runs`` columns)."""

    n_iterations: int | None
    median_s: float | None
    mean_s: float | None
    p10_s: float | None
    p90_s: float | None
    cv: float | None
    noisy: bool | None
    samples_per_s: float | None
    final_loss: float | None


@dataclass(frozen=True)
class StoredTelemetry(RunTelemetry):
    """The run's telemetry summary over its measured window as its ``runs`` row holds it
    (docs/telemetry.md; None where the row has none), with the peaks its end stored."""

    rss_peak_kernel_bytes: int | None = None
    """The kernel's peak RSS (``wait4``: the largest process of the run's tree)."""
    gpu_mem_framework_peak_bytes: int | None = None
    """The framework's own GPU memory peak (the runner's ``done`` event)."""
    page_faults_per_step: float | None = None
    """The runner's page faults per measured step (the ``done`` event's)."""

    def short(self, group: str, serve: bool = False) -> str | None:
        """Why the ``gpu`` or host (``telemetry``) figures are not shown: too few readings
        or too short a window (:mod:`dltop.telemetry.readings`), without the ``n/a: ``;
        ``serve``: a serve run's (its window is its requests': min_time_s does not apply)."""
        hint = SERVE_HINT if serve else HINT
        why = gpu_shortfall(self.window_s, self.gpu_readings, hint) if group == "gpu" \
            else host_shortfall(self.window_s, self.host_readings, hint)
        return None if why is None else why.removeprefix("n/a: ")


@dataclass(frozen=True)
class RunDetail:
    """A run, its job's configuration and the job's other attempts."""

    run_id: int
    job_id: int
    campaign_id: int
    attempt: int
    attempts: tuple[int, ...]
    """Run ids of the job's attempts, oldest first (this one among them)."""
    framework: str
    model: str
    batch_size: int
    device: str
    repeat: int
    iterations: int
    warmup: int
    status: str
    started_at: str | None
    finished_at: str | None
    wall_s: float | None
    error_kind: str | None
    error_message: str | None
    note: str | None
    protocol_errors: int | None
    log_path: str | None
    stored_log_tail: str | None
    """The tail the engine stored when the run ended (the log itself may be gone)."""
    gpu_indices: str | None
    samples_per_iter: int | None
    stats: RunStats
    telemetry: StoredTelemetry
    environment: tuple[tuple[str, str | None], ...]
    """(column, value) of its ``environment`` row; empty when it has none."""
    pruned: bool
    """``dltop prune`` deleted its raw rows (and its run folder)."""
    profile: tuple[ProfileOp, ...] = ()
    """Top operators by self time (``profile = true``), per profiled step."""
    profile_steps: int | None = None
    profile_step_ms: float | None = None
    profile_device: str | None = None
    node_gpus: tuple[NodeGpu, ...] = ()
    """Each node's GPUs (a Slurm run's node agents); empty for a local run."""
    generation: gen.GenStats | None = None
    """TTFT/TPOT/ITL of its measured generation requests so far (``mode = "generate"``)."""
    settings: str = ""
    """The identity fields that vary in its campaign, as its run label shows them
    (:func:`dltop.results.labels.settings_text`; empty: none, or not read)."""
    queue_s: float | None = None
    """Seconds its Slurm job waited in the queue (``wall_s`` and ``started_at`` exclude
    it); None: not a Slurm batch job, or it has not started yet."""
    slurm_acct: str | None = None
    """What Slurm's accounting says of its job (MaxRSS, elapsed, energy), or why nothing."""
    serving: ServeTrace | None = None
    """A serve run's requests so far: latency over time, TTFT and ITL histograms."""

    @property
    def label(self) -> str:
        """``torch fcn-r b64 cpu:1 bf16 #1``: the run label (:mod:`dltop.results.labels`)
        and the repeat."""
        return labels.compose(self.framework, self.model, self.batch_size, self.device,
                              self.settings, self.repeat)

    @property
    def running(self) -> bool:
        """Whether the run was still going when read."""
        return self.status == RunStatus.RUNNING

    @property
    def attempt_index(self) -> int:
        """Position of this run among :attr:`attempts` (0 = the first)."""
        return self.attempts.index(self.run_id) if self.run_id in self.attempts else 0

    @property
    def serve(self) -> bool:
        """Whether it is a serve run (:data:`~dltop.catalog.SERVE_FRAMEWORKS`)."""
        return self.framework in SERVE_FRAMEWORKS

    @property
    def uses_gpu(self) -> bool:
        """Whether the run had GPUs (a ``cpu:N`` job has none)."""
        return bool(self.gpu_indices) or not self.device.startswith("cpu")

    def why_missing(self, group: str) -> str:
        """Why values of ``group`` (``stats``, ``gpu``, ``telemetry``, ``environment``,
        ``log``; ``samples``: the telemetry rows over time) are missing, in a few words."""
        if group == "environment":
            return ("the runner never reported it (it ended before its first message)"
                    if not self.running else "not reported yet")
        if group == "log":
            if not self.log_path:
                return "the run never started a runner"
            return "deleted by dltop prune" if self.pruned else "the file is gone"
        if group == "samples":  # the rows over time, which the charts draw
            if self.pruned:
                return "raw rows deleted by dltop prune (the summaries are kept)"
            return "none stored yet" if self.running else self.why_missing("telemetry")
        if self.running:
            return "computed when the run ends"
        if group == "gpu" and not self.uses_gpu:
            return "CPU job: no GPU"
        if group == "stats" and not self.stats.n_iterations:
            return "no measured iteration"
        if group in ("gpu", "telemetry") and (short := self.telemetry.short(group, self.serve)):
            return short  # before "not supported": a short window is no GPU's fault
        if self.telemetry.telemetry_note:
            return self.telemetry.telemetry_note
        if group == "gpu":
            return "not reported by the GPU (NVML: not supported)"
        if group == "telemetry":
            return "no telemetry stored for this run (sampling off, or it ended first)"
        return "not recorded"


_BOOLS = ("contaminated", "telemetry_simulated")
"""Its columns stored as 0 or 1 (the others read back as stored)."""


def _b(v: Any) -> bool | None:
    return None if v is None else bool(v)


def _environment(env: dict[str, Any]) -> tuple[tuple[str, str | None], ...]:
    """(column, value) of an ``environment`` row; the GPUs' settings at start, kept in
    ``extra``, get a line each (``gpu0 at start``) before the rest of ``extra``."""
    rows: list[tuple[str, str | None]] = []
    for k in ENV_FIELDS:
        if k not in env:
            continue
        value = env[k]
        if k == "extra" and (facts := gpu_facts_texts(value)):
            rows += [(f"gpu{i} at start", text) for i, text in facts]
            rest = json.loads(value)
            rest.pop(GPU_FACTS_KEY, None)
            value = json.dumps(rest)
        rows.append((k, None if value is None else str(value)))
    return tuple(rows)


def cpu_energy_text(m: StoredTelemetry) -> str | None:
    """``41.2 ±0.5 J, 0.3433 J/sample (package 38.0 + DRAM 3.2)``, or why there is none."""
    if m.cpu_energy_j is None:
        return m.cpu_energy_note
    total = m.cpu_energy_j + (m.dram_energy_j or 0.0)
    bound = "" if m.cpu_energy_bound_j is None else f" ±{m.cpu_energy_bound_j:.2g}"
    dram = "" if m.dram_energy_j is None else f" + DRAM {m.dram_energy_j:.1f}"
    per = "" if m.cpu_joules_per_sample is None else f", {m.cpu_joules_per_sample:.4g} J/sample"
    return f"{total:.1f}{bound} J{per} (package {m.cpu_energy_j:.1f}{dram})"


def read_run_detail(db: Db, run_id: int) -> RunDetail | None:
    """Everything the detail view shows of a run but its series (None: no such run)."""
    r = runs.with_job(db, run_id)
    if r is None:
        return None
    env = run_rows.environment_row(db, run_id)
    stats = RunStats(r["n_iterations"], _f(r["median_s"]), _f(r["mean_s"]), _f(r["p10_s"]),
                     _f(r["p90_s"]), _f(r["cv"]), _b(r["noisy"]), _f(r["samples_per_s"]),
                     _f(r["final_loss"]))
    stored: dict[str, Any] = {f.name: _b(r[f.name]) if f.name in _BOOLS else r[f.name]
                              for f in fields(StoredTelemetry) if f.name in r}
    environment = _environment(env) if env else ()
    return RunDetail(
        run_id=int(r["id"]), job_id=int(r["job_id"]), campaign_id=int(r["campaign_id"]),
        attempt=int(r["attempt"] or 1), attempts=run_rows.job_attempts(db, int(r["job_id"])),
        framework=r["framework"], model=r["model"], batch_size=int(r["batch_size"]),
        device=r["device"], repeat=int(r["repeat"]), iterations=int(r["iterations"]),
        warmup=int(r["warmup"]), status=r["status"], started_at=r["started_at"],
        finished_at=r["finished_at"], wall_s=_f(r["wall_s"]), error_kind=r["error_kind"],
        error_message=r["error_message"], note=r["note"],
        protocol_errors=r["protocol_errors"], log_path=run_rows.log_path(db, r["log_path"]),
        stored_log_tail=r["log_tail"], gpu_indices=r["gpu_indices"],
        samples_per_iter=r["samples_per_iter"], stats=stats, telemetry=StoredTelemetry(**stored),
        environment=environment, pruned=run_rows.pruned(db, run_id),
        profile=profile_ops(db, run_id, r.get("profile_steps")),
        profile_steps=r.get("profile_steps"), profile_step_ms=_f(r.get("profile_step_ms")),
        profile_device=r.get("profile_device"), node_gpus=node_gpus(db, run_id),
        generation=gen.stats(gen.generations_of(db, [run_id]).get(run_id, ())),
        queue_s=_f(r.get("queue_s")), slurm_acct=slurm_acct_text(r),
        serving=serve_trace(serve_requests_of(db, [run_id]).get(run_id, ())))


def stats_so_far(detail: RunDetail, trace: RunTrace | None) -> RunStats | None:
    """A running run's statistics over the measured iterations stored so far (None
    before the first). A thinned trace gives them from its every k-th row; ``n`` is
    still the count stored."""
    from dltop.results.stats import summarize_run

    if trace is None or trace.pruned:
        return None
    seconds = [p.seconds for p in trace.iterations if not p.warmup]
    if not seconds:
        return None
    s = summarize_run(seconds, detail.samples_per_iter or detail.batch_size)
    loss = next((p.loss for p in reversed(trace.iterations) if p.loss is not None), None)
    return RunStats(max(len(seconds), trace.n_iterations - detail.warmup), s.median_s,
                    s.mean_s, s.p10_s, s.p90_s, s.cv, s.noisy, s.samples_per_s, loss)


def log_tail(detail: RunDetail, lines: int = 12) -> tuple[tuple[str, ...], bool]:
    """The last lines of the run's log and whether they come from the file itself
    (False: the tail stored when the run ended, the file being gone)."""
    if detail.log_path and Path(detail.log_path).is_file():
        return read_log_tail(detail.log_path, lines), True
    stored = (detail.stored_log_tail or "").splitlines()
    return tuple(s[-500:] for s in stored[-lines:]), False


def extend_trace(db: Db, trace: RunTrace | None, run_id: int, *,
                 max_points: int = DEFAULT_MAX_POINTS) -> RunTrace:
    """``trace`` with the rows stored since it was read (a running run's refresh).

    Reads only iterations past its last index and telemetry windows past its last
    time; reads the whole trace again (thinned anew) when there is none yet, when
    it has no time axis, or when the appended rows made it twice ``max_points``.
    """
    if trace is None or trace.pruned or trace.run_id != run_id or not trace.iterations \
            or trace.iterations[-1].t_end_s is None:
        return read_trace(db, run_id, max_points=max_points)
    last = trace.iterations[-1]
    end_ns = run_rows.iteration_end_ns(db, run_id, last.idx)
    if end_ns is None or last.t_end_s is None:
        return read_trace(db, run_id, max_points=max_points)
    origin = end_ns / 1e9 - last.t_end_s
    its = run_rows.iterations_after(db, run_id, last.idx)
    new_its = tuple(IterPoint(int(i["idx"]), i["t_mono_ns"] / 1e9 - origin
                              if i["t_mono_ns"] else None, float(i["seconds"]),
                              bool(i["warmup"]), i["loss"], i["samples"]) for i in its)
    gpu_t = max((s.points[-1].t_s for s in trace.gpus if s.points), default=None)
    # a window without a start time is never new: the first read drew what it could
    gpu = samples.gpu_series(db, run_id, since_s=-1e300 if gpu_t is None else gpu_t + origin)
    host = samples.host_series(db, run_id, since_s=trace.host[-1].t_s + origin
                               if trace.host else -1e300)
    series = {(s.node or "", s.gpu_index): (s.simulated, list(s.points)) for s in trace.gpus}
    for g in gpu:
        key = (g["node"] or "", int(g["gpu_index"]))  # a Slurm run's nodes each have a GPU 0
        sim, pts = series.setdefault(key, (False, []))
        pts.append(GpuPoint(g["t_start_mono_s"] - origin, g["util_mean_pct"],
                            g["mem_used_max_bytes"], g["power_mean_w"],
                            g["temperature_max_c"], g["sm_clock_mhz"]))
        series[key] = (sim or bool(g["simulated"]), pts)
    iterations = trace.iterations + new_its
    longest = max([len(iterations), len(trace.host) + len(host),
                   *(len(p) for _, p in series.values())])
    if longest > 2 * max_points:
        return read_trace(db, run_id, max_points=max_points)
    warm = [p.t_end_s for p in new_its if p.warmup and p.t_end_s is not None]
    return replace(
        trace, iterations=iterations,
        gpus=tuple(GpuSeries(i, sim, tuple(p), node or None)
                   for (node, i), (sim, p) in sorted(series.items())),
        host=trace.host + tuple(HostPoint(h["t_start_mono_s"] - origin, h["cpu_mean_pct"],
                                          h["tree_cpu_pct"], h["tree_rss_bytes"])
                                for h in host),
        n_iterations=trace.n_iterations + len(new_its),
        warmup_end_s=max(warm) if warm else trace.warmup_end_s)
