"""A run's ``plan``, ``eval``, ``profile`` (issue 17) and ``generate`` (issue 29) events.

The :class:`~dltop.jobs.collector.IterationCollector` hands every event other
than ``iter`` here. Events arrive already checked (:mod:`dltop.jobs.protocol_evals`).
Evaluations are a few per run: each is written as it comes (through the
engine's single writer, ordered behind the run's iteration rows), so a run
that dies later keeps the evaluations it made. The operator profile is one
write. A ``generate`` event waits for the ``iter`` of its index (the request's
end-to-end seconds) and the pair becomes one ``generations`` row, buffered and
written with the iteration rows (:meth:`RunExtras.flush`); one whose ``iter`` never
came (the runner died in between) is written at the run's end with ``e2e_s`` NULL.
At the run's end :meth:`RunExtras.fields` gives the ``runs`` columns of an inference
run's latency percentiles and a generate run's distinct-token fraction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from dltop.catalog import OPERATOR_PROFILE
from dltop.jobs.serving import ServeExtras
from dltop.results.convergence import percentile
from dltop.store.generations import DISTINCT_COLUMN, pack_seconds
from dltop.store.writer import Store
from dltop.telemetry.values import finite_float

PLAN_COLUMN = "plan_iterations"


def eval_row(event: dict[str, Any]) -> dict[str, Any]:
    """The ``evals`` row of a checked ``eval`` event."""
    try:
        t_mono_ns = int(event["t_mono_ns"])
    except (KeyError, TypeError, ValueError):
        t_mono_ns = time.monotonic_ns()
    samples = event.get("samples")
    return {"idx": int(event["index"]), "epoch": finite_float(event.get("epoch")),
            "accuracy": finite_float(event.get("accuracy")),
            "perplexity": finite_float(event.get("perplexity")),
            "loss": finite_float(event.get("loss")),
            "eval_s": float(event["eval_s"]), "train_s": float(event["train_s"]),
            "samples": None if samples is None else int(samples), "t_mono_ns": t_mono_ns}


def profile_rows(event: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(``runs`` columns, ``profile_ops`` rows) of a checked ``profile`` event.

    An operator's share is its self time (kernel time on CUDA when the runner
    measured it, else CPU time) over the profiled steps' wall time, in %.
    """
    steps = int(event["steps"])
    step_ms = float(event["step_ms"])
    device = str(event["device"])
    wall_ms = step_ms * steps
    ops = []
    for op in event.get("ops") or ():
        dev = finite_float(op.get("self_device_ms"))
        cpu = float(op["self_cpu_ms"])
        own = dev if device == "cuda" and dev is not None else cpu
        ops.append({"name": str(op["name"]), "calls": int(op["calls"]), "self_cpu_ms": cpu,
                    "self_device_ms": dev, "total_ms": float(op["total_ms"]),
                    "share_pct": 100.0 * own / wall_ms, "shapes": op.get("shapes")})
    return ({"profile_steps": steps, "profile_step_ms": step_ms, "profile_device": device},
            ops)


def generation_row(event: dict[str, Any]) -> dict[str, Any]:
    """The ``generations`` row of a checked ``generate`` event, ``e2e_s`` not yet known."""
    return {"idx": int(event["index"]), "warmup": int(bool(event["warmup"])),
            "ttft_s": float(event["ttft_s"]), "e2e_s": None,
            "prompt_tokens": int(event["prompt_tokens"]),
            "new_tokens": int(event["new_tokens"]), "batch": int(event["batch"]),
            "itl_s": pack_seconds([float(x) for x in event["itl_s"]]),
            "distinct_tokens": None if event.get("distinct_tokens") is None
            else int(event["distinct_tokens"])}


class RunExtras:
    """One run's plan (its total steps, for progress), evaluations, profile and
    generation requests."""

    def __init__(self, run_id: int, store: Store, write_later: Callable[..., None],
                 inference: bool) -> None:
        self.run_id = run_id
        self.plan_iterations: int | None = None
        """Steps the runner said it will run (warm-up included), once its plan came."""
        self.n_generations = 0
        self._pending: dict[str, Any] | None = None
        """The last ``generate`` event's row, until its ``iter`` gives ``e2e_s``."""
        self._generations: list[dict[str, Any]] = []
        self._distinct = [0, 0]
        """Σ distinct_tokens and Σ batch × new_tokens of the measured requests that
        counted them (:data:`dltop.store.generations.DISTINCT_COLUMN`'s sums)."""
        self._inference = inference
        self._store = store
        self._write_later = write_later
        self.serve = ServeExtras(run_id, store, write_later)
        """A serve run's requests and load (``request``, ``load``: :mod:`dltop.jobs.serving`)."""

    def on_event(self, event: dict[str, Any]) -> bool:
        """Take a ``plan``, ``eval``, ``profile`` or ``generate`` event; False for any
        other event."""
        name = event.get("event")
        if name == "plan":
            self.plan_iterations = int(event["iterations"])
            self._write_later(self._store.update_run, self.run_id,
                              {PLAN_COLUMN: self.plan_iterations})
        elif name == "eval":
            self._write_later(self._store.add_evals, self.run_id, [eval_row(event)],
                              what="evaluation rows", count=1)
        elif name == "profile":
            summary, ops = profile_rows(event)
            self._write_later(self._store.set_profile, self.run_id, summary, ops,
                              what=OPERATOR_PROFILE)
        elif name == "generate":
            self.n_generations += 1
            if self._pending is not None:  # its iter never came: end-to-end unknown
                self._generations.append(self._pending)
            self._pending = generation_row(event)
            row = self._pending
            if not row["warmup"] and row["distinct_tokens"] is not None:
                self._distinct[0] += row["distinct_tokens"]
                self._distinct[1] += row["batch"] * row["new_tokens"]
        elif name in ("request", "load"):
            self.serve.on_event(event)
        else:
            return False
        return True

    def on_iter(self, index: int, seconds: float) -> None:
        """An accepted ``iter``: the end-to-end seconds of the generation request of
        the same index, if one waits."""
        if self._pending is not None and self._pending["idx"] == index:
            self._generations.append({**self._pending, "e2e_s": seconds})
            self._pending = None

    def flush(self, final: bool = False) -> None:
        """Write the generation rows complete so far (``final``: the waiting one too)."""
        if final and self._pending is not None:
            self._generations.append(self._pending)
            self._pending = None
        if self._generations:
            self._write_later(self._store.add_generations, self.run_id, self._generations,
                              what="generation rows", count=len(self._generations))
            self._generations = []
        self.serve.flush()

    def fields(self, measured_s: Sequence[float]) -> dict[str, Any]:
        """``runs`` columns at the run's end: latency p50/p99 of an inference run's
        measured iterations, a generate run's ``distinct_token_frac`` (empty for a
        training run or none measured)."""
        distinct, tokens = self._distinct
        fields: dict[str, Any] = {DISTINCT_COLUMN: distinct / tokens} if tokens else {}
        if not self._inference or not measured_s:
            return {**fields, **self.serve.fields()}
        ordered = sorted(measured_s)
        return {**fields, "latency_p50_s": percentile(ordered, 50),
                "latency_p99_s": percentile(ordered, 99)}
