"""Iteration events of one run: UI progress, buffered database rows, seconds kept in memory.

Other events (``plan``, ``eval``, ``profile``, ``generate``) go to
:class:`dltop.jobs.evals.RunExtras`;
a ``plan`` sets the progress total (and, for an ``epochs`` run, the iterations it
must measure, which no one knew before the runner loaded its data).

Each row keeps the step's end twice: ``t_mono_ns`` as the child sent it
(``time.monotonic``, system-wide on Linux; the time the event arrived when a
runner sends none) and ``t_wall_s``, epoch seconds derived from it through
:func:`dltop.telemetry.clock.anchor`. The same end goes to ``on_iteration``,
which moves the sampler's measured window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dltop.catalog import PROFILE_NOT_STORED, RunStatus
from dltop.jobs.evals import RunExtras
from dltop.jobs.events import EngineEvent, RunProgress
from dltop.jobs.supervisor import ChildOutcome
from dltop.jobs.writes import ITERATION_ROWS, join_notes
from dltop.profiles.jobspec import JobSpec
from dltop.results.stats import summarize_run
from dltop.store.writer import Store
from dltop.telemetry.clock import anchor
from dltop.telemetry.values import finite_float

FLUSH_INTERVAL_S = 0.5
"""Iterations reach the database at least this often while a run goes on."""


class IterationCollector:
    """Turns ``iter`` events into UI progress, buffered DB rows and in-memory seconds."""

    def __init__(self, run_id: int, job: JobSpec, emit: Callable[[EngineEvent], None],
                 store: Store, write_later: Callable[..., None],
                 on_iteration: Callable[[int, float, bool], None] | None = None,
                 on_idle: Callable[[int, int], None] | None = None) -> None:
        self.run_id = run_id
        self.total = job.warmup + job.iterations
        self.iterations: int | None = None if job.epochs is not None else job.iterations
        """Measured iterations the run must give (None: an epochs run before its plan)."""
        self._all_asked = job.mode != "serve"
        """Whether fewer measured iterations make the run ``short``: not for a serve run,
        whose failed requests give none (its runner judges them against
        ``max_error_rate``; they are stored as requests)."""
        self._warmup = job.warmup
        self.extras = RunExtras(run_id, store, write_later, job.mode == "inference")
        self.samples_per_iter = job.units_per_iter
        self.measured: list[float] = []
        self.last_loss: float | None = None
        self.samples_seen = 0
        self.measured_samples = 0
        """Training samples of the measured iterations (the measured window's)."""
        self.measured_sizes: set[int] = set()
        """The distinct ``samples`` of the measured iterations (kept while at most two)."""
        self._on_iteration = on_iteration
        self._on_idle = on_idle
        """Takes a serve runner's idle wait before its load (the sampler's idle power)."""
        self._emit = emit
        self._store = store
        self._write_later = write_later
        self._buffer: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()

    def on_event(self, event: dict[str, Any]) -> None:
        if event["event"] == "idle" and self._on_idle is not None:
            self._on_idle(int(event["start_mono_ns"]), int(event["end_mono_ns"]))
        if event["event"] != "iter":
            if self.extras.on_event(event) and event["event"] == "plan":
                self._take_plan(int(event["iterations"]))
            return
        try:
            index = int(event["index"])
            seconds = float(event["seconds"])
            samples = int(event.get("samples") or self.samples_per_iter)
        except (KeyError, TypeError, ValueError):
            return  # a malformed iteration event is skipped, not fatal
        loss = finite_float(event.get("loss"))  # NaN and inf: NULL
        warmup = bool(event.get("warmup"))
        try:
            t_mono_ns = int(event["t_mono_ns"])
        except (KeyError, TypeError, ValueError):
            t_mono_ns = time.monotonic_ns()
        self.extras.on_iter(index, seconds)
        if not warmup:
            self.measured.append(seconds)
            self.measured_samples += samples
            if len(self.measured_sizes) < 2:
                self.measured_sizes.add(samples)
        self.samples_seen += samples
        self.last_loss = loss
        if self._on_iteration is not None:
            self._on_iteration(t_mono_ns, seconds, warmup)
        self._buffer.append({"idx": index, "seconds": seconds,
                             "samples": samples,
                             "warmup": int(warmup), "loss": loss, "t_mono_ns": t_mono_ns,
                             "t_wall_s": anchor().wall(t_mono_ns)})
        # A time window (min_time_s, warmup_s) runs past the planned steps: the total grows.
        self.total = max(self.total, index + 1)
        self._emit(RunProgress(self.run_id, index, self.total, warmup, seconds, loss))
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def _take_plan(self, steps: int) -> None:
        # The plan's steps include warm-up; an epochs run measures the rest of them. Other
        # runs' totals come from their spec (the runner's plan says the same).
        if self.iterations is None:
            self.total = steps
            self.iterations = max(0, steps - self._warmup)

    def short(self, outcome: ChildOutcome) -> ChildOutcome:
        """``outcome``, or ``short`` with the count when an ok run measured too few."""
        n = len(self.measured)
        if outcome.status != RunStatus.OK or self.iterations is None \
                or n >= self.iterations or not self._all_asked:
            return outcome
        return replace(outcome, status=RunStatus.SHORT, message=(
            f"short: {n} of {self.iterations} measured iterations (the program ended "
            "before dltop had them all)"))

    def flush(self, final: bool = False) -> None:
        """Write the buffered rows (``final``: the run ended, nothing more will pair)."""
        if self._buffer:
            self._write_later(self._store.add_iterations, self.run_id, self._buffer,
                              what=ITERATION_ROWS, count=len(self._buffer))
            self._buffer = []
        self.extras.flush(final)
        self._last_flush = time.monotonic()


def run_fields(outcome: ChildOutcome, c: IterationCollector) -> dict[str, Any]:
    """The ``runs`` columns a finished run stores: how it ended and its statistics.

    Args:
        outcome: what the supervisor saw of the child (exit, events, log tail).
        c: the run's collector, holding its measured iterations.
    """
    fields: dict[str, Any] = {
        "exit_code": outcome.exit_code, "wall_s": outcome.wall_s,
        "error_kind": outcome.error_kind, "error_message": outcome.message,
        "protocol_errors": outcome.protocol_errors,
        "note": protocol_note(outcome),
        "log_tail": outcome.log_tail or None,
        "framework_version": outcome.hello.get("framework_version"),
        "device_name": outcome.hello.get("device_name"),
        "param_count": outcome.model.get("param_count"),
        "flops_per_sample": outcome.model.get("flops_per_sample"),
        "final_loss": c.last_loss,
        "rss_peak_kernel_bytes": outcome.rss_peak_kernel_bytes,
        "gpu_mem_framework_peak_bytes": outcome.done.get("gpu_mem_peak_bytes"),
        "page_faults_per_step": outcome.done.get("page_faults_per_step"),
    }
    if c.measured:
        # A runner whose every step reports another sample count than the spec's batch
        # (a transformer's tokens, a generate request's batch x new tokens) sets it.
        per_iter = next(iter(c.measured_sizes)) if len(c.measured_sizes) == 1 \
            else c.samples_per_iter
        fields.update(summarize_run(c.measured, per_iter).to_columns())
    extra = c.extras.fields(c.measured)
    fields["note"] = join_notes(fields["note"], extra.pop("note", None))
    fields.update(extra)
    return fields


def protocol_note(outcome: ChildOutcome) -> str | None:
    """``protocol errors (3), first: iter event: seconds -6.24 is not ...`` (None if none),
    and ``operator profile not stored: ...`` when the refused events included the
    runner's profile (the export and the run detail say so instead of "not set")."""
    if not outcome.protocol_errors:
        return None
    n = outcome.protocol_errors
    first = outcome.protocol_note or "unknown"
    lost = outcome.profile_refused
    if lost is not None and lost == first:  # the profile was the first refused event
        first, lost = f"{PROFILE_NOT_STORED}: {first}", None
    note = f"protocol error{'s' if n > 1 else ''} ({n}), first: {first}"
    return note if lost is None else f"{note}; {PROFILE_NOT_STORED}: {lost}"
