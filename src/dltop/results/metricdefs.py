"""Every metric, declared once (:class:`Metric`: name, title, unit, header, format,
direction, how a cell is made, modes, compute function), and a configuration's value of
it (:class:`Value`: a number, or why there is none).

The ``--metric`` choices, the pivot's notes, the TUI's switch and best cell, compare's
verdicts and docs/metrics.md's table (a test draws it) read these declarations.
A compute function lives beside its kind (:mod:`dltop.results.metrics`,
:mod:`dltop.results.convmetrics`) and names its metric with :func:`computes`: this module
stays light, for the command-line parser.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dltop.catalog import MODES, OWN_MODEL
from dltop.results.table import Millis, fmt_seconds

if TYPE_CHECKING:
    from dltop.results.aggregate import ConfigResult

MIB = 1024 * 1024
READINGS = ("readings",)
"""The detail of a telemetry figure: the fewest readings behind it of any of its runs
(CSV gives it a column of its own; JSON cells also carry ``window_s``, the shortest)."""
PCT = ("p90_s", "p99_s", "n")
"""The detail of a percentile metric: p90, p99 and the samples behind them."""
RUNS = ("runs", "min", "max")
"""The detail of a serve run's rate over several runs: their count, lowest and highest."""
TRAIN, REQUESTS, GENERATE = ("train",), ("inference", "generate", "serve"), ("generate",)
DECODE, SERVE = ("generate", "serve"), ("serve",)
FASTER, MFU = ("faster", "slower"), ("higher MFU", "lower MFU")


_g4 = fmt_seconds


def _f(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:.{digits}f}"


@dataclass(frozen=True)
class Metric:
    """One metric: its name on the command line, its title and unit, and what it is."""

    name: str
    title: str
    """What the numbers are, with the unit (a table's title; the TUI's switch)."""
    unit: str
    header: str
    """Short column header, unit included."""
    fmt: Callable[[float], str]
    higher: bool = False
    """The largest value is the best (rates, utilisations); else the smallest (times...)."""
    how: str = "mean of each run's value"
    """How a cell is made of the ok runs (the pivot's note, docs/metrics.md)."""
    modes: tuple[str, ...] = MODES
    """The modes whose runs can have a value; a metric of some modes only is shown where a
    configuration has one (:data:`CONVERGENCE`)."""
    timed: bool = False
    """Computed from iteration times: a noisy run (``*``) makes it uncertain."""
    detail: tuple[str, ...] = ()
    """Numbers of its :attr:`Value.extra` that CSV exports in columns of their own."""
    ms: Millis | None = None
    """Seconds that Markdown and LaTeX show in ms (:attr:`dltop.results.table.Column.ms`)."""
    words: tuple[str, ...] = ()
    """``dltop compare``'s verdicts (better, worse): it compares the metrics that have them."""
    pivot: bool = True
    """A ``--metric`` choice (the pivot, the TUI's switch); else a summary column, or a
    ``--flops`` variant."""
    per_sample: bool = False
    """Counted per sample: a transformer's are tokens (:mod:`dltop.results.tokens` reads its
    title, unit and header of tokens off this declaration)."""
    serve: tuple[str, str, str] | None = None
    """(title, header, unit) of a set of serve runs, whose iterations are requests
    (:meth:`of_modes`); None: it reads the same."""

    def of_modes(self, modes: Collection[str]) -> Metric:
        """The metric as a table of runs of ``modes`` names it: a set of serve runs' time
        is the median end-to-end request latency, not seconds per mini-batch."""
        if self.serve is None or set(modes) != {"serve"}:
            return self
        title, header, unit = self.serve
        return replace(self, title=title, header=header, unit=unit)

    @property
    def label(self) -> str:
        """Its short name in a figure's panel or a detail row (``TTFT``, ``decode``): the
        first word of its header."""
        return self.header.split()[0]

    def compute(self, res: ConfigResult) -> Value:
        """The value of a configuration with ok runs (the function that :func:`computes` it)."""
        return _COMPUTE[self.name](res)


DECLARED = (
    Metric("time", "median seconds per mini-batch", "s", "median s", _g4, timed=True,
           how="median of each run's median", words=FASTER,
           serve=("median end-to-end request latency in s", "median e2e s", "s")),
    Metric("mean-time", "mean seconds per mini-batch", "s", "mean s", _g4, timed=True,
           serve=("mean end-to-end request latency in s", "mean e2e s", "s")),
    Metric("throughput", "samples per second (total samples / total measured seconds)",
           "samples/s", "samples/s", _f(1), higher=True, timed=True, words=FASTER,
           how="median of each run's total samples / total seconds", per_sample=True,
           serve=("output tokens per second of one request (new tokens / its end-to-end s)",
                  "tok/s per request", "tokens/s")),
    Metric("power", "mean GPU power in W (sum over the run's GPUs)", "W", "power W", _f(1),
           detail=READINGS),
    Metric("energy", "energy in J per sample: the GPUs' on GPU runs, the CPU packages' and "
           "DRAM's (RAPL) on CPU runs", "J/sample", "J/sample", _g4, detail=READINGS,
           words=("less energy", "more energy"), per_sample=True),
    Metric("gpu-memory", "peak GPU memory of the run's processes in MiB", "MiB",
           "GPU mem MiB", _f(0), detail=READINGS, how="maximum of each run's peak"),
    Metric("gpu-memory-device", "peak memory used on the run's GPUs (all processes) in MiB",
           "MiB", "GPU dev MiB", _f(0), detail=READINGS, pivot=False),
    Metric("host-memory", "peak resident memory (RSS) in MiB: the larger of the kernel's "
           "(the largest process of the run's tree, exact) and the tree's sampled sum",
           "MiB", "RSS MiB", _f(0), detail=READINGS, how="maximum of each run's peak"),
    Metric("cpu", "mean CPU of the run's process tree in % (100 = one core)", "%",
           "CPU %", _f(1), detail=READINGS,
           how="mean of each run's process-tree value (100 = one core; in brackets the "
           "whole host's user (us), system (sy) and iowait (wa) CPU in % of all CPUs, means "
           "of the same runs)"),
    Metric("host-cpu", "mean CPU of the whole host in %", "%", "host CPU %", _f(1),
           detail=READINGS, pivot=False),
    Metric("host-user", "host CPU in user mode in % of all CPUs", "%", "host usr %", _f(1),
           detail=READINGS, pivot=False),
    Metric("host-system", "host CPU in kernel mode in % of all CPUs", "%", "host sys %",
           _f(1), detail=READINGS, pivot=False),
    Metric("host-iowait", "host CPU idle waiting for I/O in % of all CPUs", "%",
           "host iowait %", _f(1), detail=READINGS, pivot=False),
    Metric("tflops", "achieved TFLOP/s (training FLOPs per sample × samples/s)",
           "TFLOP/s", "TFLOP/s", _g4, higher=True, timed=True, per_sample=True,
           how="FLOPs per sample × the throughput cell", modes=OWN_MODEL),
    Metric("mfu", "model FLOPs utilisation in % (achieved ÷ peak for the precision)", "%",
           "MFU %", _f(1), higher=True, timed=True, words=MFU,
           how="TFLOP/s ÷ the devices' peak for the precision", modes=OWN_MODEL),
    Metric("accuracy", "test accuracy at the last evaluation (fraction of test samples)",
           "fraction", "accuracy", _f(4), higher=True, modes=TRAIN,
           how="mean of each run's last evaluation"),
    Metric("time-to-accuracy", "training seconds to the first evaluation at or above "
           "target_accuracy (evaluations excluded; their seconds in brackets)", "s",
           "TTA s", lambda v: f"{v:.4g}", modes=TRAIN, timed=True,
           how="median, over the runs that reached target_accuracy, of the training seconds "
           "to their first evaluation at or above it (evaluations excluded, their seconds in "
           "brackets; (n/m reached) when some runs never did; not reached: none did)"),
    Metric("time-to-perplexity", "training seconds to the first evaluation at or below "
           "target_perplexity (evaluations excluded; their seconds in brackets)", "s",
           "TTP s", lambda v: f"{v:.4g}", modes=TRAIN, timed=True,
           how="median, over the runs that reached target_perplexity, of the training "
           "seconds to their first evaluation at or below it (as time-to-accuracy)"),
    Metric("epoch-time", "median training seconds per epoch (evaluations excluded)", "s",
           "s/epoch", lambda v: f"{v:.4g}", modes=TRAIN, timed=True,
           how="median of each run's median training seconds per epoch"),
    Metric("latency", "seconds per inference batch or generation request (end to end): "
           "p50 / p90 / p99", "s", "p50/p90/p99 s", _g4, modes=REQUESTS, timed=True,
           detail=PCT, ms=Millis.SUB_SECOND,
           how="p50 / p90 / p99 of every measured iteration of the ok runs together "
           "(inference batches; generate runs: end-to-end seconds per request)"),
    Metric("perplexity", "test perplexity at the last evaluation (language model)", "",
           "perplexity", _f(2), modes=TRAIN, how="mean of each run's last evaluation"),
    Metric("ttft", "time to first token in s (prefill and first token): p50 / p90 / p99",
           "s", "TTFT p50/p90/p99 s", _g4, modes=DECODE, timed=True, detail=PCT, words=FASTER,
           ms=Millis.ALWAYS, how="p50 / p90 / p99 of the time to first token of every "
           "measured generation request of the ok runs together"),
    Metric("tpot", "time per output token in s ((end to end - TTFT) / (new tokens - 1) "
           "per request): p50 / p90 / p99", "s", "TPOT p50/p90/p99 s", _g4, modes=DECODE,
           timed=True, detail=PCT, ms=Millis.ALWAYS, words=FASTER,
           how="p50 / p90 / p99, over every measured generation request of the ok runs, "
           "of (end to end - TTFT) / (new tokens - 1)"),
    Metric("itl", "inter-token latency in s (every decoded token): p50 / p90 / p99", "s",
           "ITL p50/p90/p99 s", _g4, modes=DECODE, timed=True, detail=PCT,
           ms=Millis.ALWAYS, how="p50 / p90 / p99 of every inter-token latency of the "
           "measured generation requests of the ok runs together"),
    Metric("decode-rate", "decoded tokens per second (batch × (new tokens - 1) / Σ ITL, "
           "prefill excluded)", "tokens/s", "decode tok/s", _f(1), higher=True,
           modes=DECODE, timed=True, detail=("n",),
           how="median of each run's batch × (new tokens - 1) / Σ inter-token latency over "
           "its measured requests (prefill excluded)"),
    Metric("mbu", "model bandwidth utilisation in % (bytes a decode step must move: weights, "
           "KV cache read and written; ÷ TPOT p50 ÷ the GPU's peak memory bandwidth)", "%",
           "MBU %", _f(1), higher=True, modes=GENERATE, timed=True, detail=("achieved_tb_s",),
           how="mean bytes a decode step must move (weights at the precision, KV cache read "
           "and written; docs/metrics.md) ÷ the TPOT p50 of the measured requests of the ok "
           "runs ÷ the GPU's peak memory bandwidth (in brackets: achieved and peak TB/s)"),
    Metric("prefill-tflops", "achieved TFLOP/s of the prefill (its forward FLOPs, LM head "
           "at the last position; ÷ TTFT p50)", "TFLOP/s", "prefill TFLOP/s", _g4,
           higher=True, modes=GENERATE, timed=True,
           how="prefill FLOPs (the LM head at the last position) ÷ the TTFT p50 of the "
           "measured requests of the ok runs"),
    Metric("req-rate", "requests per second completed (ok measured requests / the measured "
           "window; serve runs)", "req/s", "req/s", _f(2), higher=True, modes=SERVE,
           detail=("asked", *RUNS),
           how="median of each serve run's ok measured requests / its measured window"),
    Metric("output-rate", "output tokens per second of a serve run's ok requests over its "
           "window", "tokens/s", "out tok/s", _f(1), higher=True, modes=SERVE,
           detail=RUNS, how="median of each serve run's output tokens / its measured window"),
    Metric("goodput", "requests per second meeting every SLO given (slo_ttft_ms, "
           "slo_tpot_ms, slo_e2e_ms)", "req/s", "goodput req/s", _f(2), higher=True, modes=SERVE,
           detail=RUNS, how="median of each serve run's requests meeting every SLO / its window"),
    Metric("error-rate", "failed measured requests of a serve run in %", "%", "errors %",
           _f(1), modes=SERVE, detail=("failed", "n"),
           how="failed measured requests of the ok serve runs together, in %"),
    Metric("itl-chunk", "inter-chunk latency in s (every gap between streamed content "
           "chunks): p50 / p90 / p99", "s", "ITL/chunk p50/p90/p99 s", _g4, modes=SERVE,
           detail=PCT, ms=Millis.ALWAYS, how="p50 / p90 / p99 of every gap between content "
           "chunks of the ok serve runs' measured requests"),
    Metric("dispatch-lag", "how late each request left past its scheduled arrival, in s: "
           "p50 / p90 / p99", "s", "lag p50/p90/p99 s", _g4, modes=SERVE, detail=PCT,
           ms=Millis.ALWAYS, how="p50 / p90 / p99 of every measured request's dispatch lag"),
    Metric("slot-wait", "time each request waited for a concurrency slot, in s: p50 / p90 / "
           "p99", "s", "slot wait p50/p90/p99 s", _g4, modes=SERVE, detail=PCT,
           ms=Millis.ALWAYS, how="p50 / p90 / p99 of every measured request's wait for a slot"),
    Metric("j-per-token", "GPU energy per output token in J over a serve run's measured "
           "window (in brackets: net of the idle power of the same GPUs before the load)",
           "J/token", "J/token", _g4, modes=SERVE, detail=("net_j", "idle_power_w", *READINGS),
           how="mean of each serve run's GPU energy over its measured window / output tokens "
           "of its ok measured requests; net: (energy - idle power × window) / tokens, the "
           "idle power measured just before the load"),
    Metric("j-per-request", "GPU energy per ok request in J over a serve run's measured "
           "window (in brackets: net of the idle power before the load)", "J/request",
           "J/request", _g4, modes=SERVE, detail=("net_j", "idle_power_w", *READINGS),
           how="mean of each serve run's GPU energy over its measured window / its ok "
           "measured requests; net as j-per-token's"),
    Metric("client-cpu", "the serve client's CPU over its window in % (100 = one core)", "%",
           "client CPU %", _f(1), modes=SERVE,
           how="mean of each serve run's client CPU over its window"),
    Metric("cached-share", "share of the prompt tokens the server served from its prefix "
           "cache in % (its usage's prompt_tokens_details.cached_tokens)", "%", "cached %",
           _f(1), higher=True, modes=SERVE, detail=("cached", "prompt"),
           how="the ok measured requests' cached prompt tokens / their prompt tokens, of "
           "those whose usage gave both, all runs together"),
    Metric("distinct-tokens", "distinct-token fraction of the generated tokens (each "
           "sequence's distinct ids / new tokens, over the measured requests): 1 / new "
           "tokens for a decoder repeating one token", "fraction", "distinct tok", _f(3),
           higher=True, modes=GENERATE,
           how="mean of each run's distinct-token fraction (each sequence's distinct "
           "generated ids / new tokens, over its measured requests)"),
)
BY_FLOPS = (  # --flops no-embedding: torchtitan's count (results/lmcost.py)
    Metric("tflops-no-embedding", "achieved TFLOP/s, FLOPs without the embedding "
           "(torchtitan's convention) × samples/s", "TFLOP/s", "TFLOP/s (no emb.)", _g4,
           higher=True, timed=True, pivot=False,
           how="FLOPs per sample without the embedding × the throughput cell"),
    Metric("mfu-no-embedding", "model FLOPs utilisation in %, FLOPs without the embedding "
           "(torchtitan's convention) ÷ peak for the precision", "%", "MFU % (no emb.)",
           _f(1), higher=True, timed=True, pivot=False, words=MFU,
           how="TFLOP/s (FLOPs without the embedding) ÷ the devices' peak for the precision"),
)
"""TFLOP/s and MFU by torchtitan's FLOPs count (``--flops no-embedding``)."""
METRICS = {m.name: m for m in DECLARED if m.pivot}
"""By command-line name, in the order ``dltop export --metric`` lists them: the metrics of
every run, then those of some modes only (:data:`CONVERGENCE`)."""
EXTRA = {m.name: m for m in (*DECLARED, *BY_FLOPS) if not m.pivot}
"""The summary's columns that are no ``--metric`` choice (the GPU's peak, the host CPU and
its split) and :data:`BY_FLOPS`."""
SUMMARY = tuple(m.name for m in DECLARED if m.modes in (MODES, OWN_MODEL))
"""The summary's metric columns, in order (:data:`CONVERGENCE` follow where valued); one of
:data:`~dltop.catalog.OWN_MODEL` (TFLOP/s, MFU) is left out of a set of serve runs."""
CONVERGENCE = tuple(n for n, m in METRICS.items() if m.modes not in (MODES, OWN_MODEL))
"""Metrics of some modes only: convergence runs (evaluations), inference runs (latency),
generate and serve runs; a summary column (a TUI switch) only where some configuration
has a value."""
GENERATION = tuple(n for n, m in METRICS.items() if m.modes in (DECODE, GENERATE))
"""The metrics of generate runs (TTFT, TPOT, ITL, decode tokens/s...; serve runs too)."""

HOST_SPLIT = {"host-user": "host_cpu_user_pct", "host-system": "host_cpu_system_pct",
              "host-iowait": "host_cpu_iowait_pct"}
"""The host CPU split's metrics and their ``runs`` columns (means over the measured window)."""


@dataclass(frozen=True)
class Value:
    """A configuration's value of a metric, or why there is none."""

    value: float | None
    reason: str = ""
    """Why ``value`` is ``None``: a status label, ``n/a: ...`` or ``simulated``; beside a
    number, why a detail number is missing (``p99 n/a: n=20``)."""
    simulated_value: float | None = None
    """The number read from simulated GPUs (never shown as a plain value)."""
    source: str = ""
    """``device`` when GPU memory fell back to the device's peak (processes not visible)."""
    suffix: str = ""
    """Shown after the number: latency's p90/p99, time-to-accuracy's evaluation seconds."""
    extra: tuple[tuple[str, float | None], ...] = ()
    """More numbers of the cell for JSON/CSV detail (``p90_s``, ``eval_s``...)."""

    def text(self, metric: Metric) -> str:
        """The display text: the formatted number (``(device)`` if so), else the reason."""
        if self.value is None:
            return self.reason
        return metric.fmt(self.value) + (" (device)" if self.source == "device" else "") \
            + self.suffix


def metric(name: str) -> Metric:
    """A metric by name (``time``, ``throughput``...; also the summary's extras).

    Raises:
        ValueError: an unknown name.
    """
    found = METRICS.get(name) or EXTRA.get(name)
    if found is None:
        raise ValueError(f"unknown metric {name!r}: use one of {', '.join(METRICS)}")
    return found


_COMPUTE: dict[str, Callable[[ConfigResult], Value]] = {}


def computes(*names: str) -> Callable[[Callable[[ConfigResult], Value]],
                                      Callable[[ConfigResult], Value]]:
    """Make the decorated function the compute function of the metrics ``names``.

    Raises:
        ValueError: an undeclared name. RuntimeError: a metric that has its function.
    """
    def register(fn: Callable[[ConfigResult], Value]) -> Callable[[ConfigResult], Value]:
        for name in names:
            if metric(name).name in _COMPUTE:
                raise RuntimeError(f"metric {name!r} has a compute function already")
            _COMPUTE[name] = fn
        return fn
    return register


def check_computed() -> None:
    """Raises RuntimeError unless every declared metric has its compute function."""
    missing = [n for n in (*METRICS, *EXTRA) if n not in _COMPUTE]
    if missing:
        raise RuntimeError(f"metrics without a compute function: {', '.join(missing)}")


def mean_or_none(values: list[float]) -> float | None:
    """The mean of ``values``, or None for none."""
    # statistics.fmean's own sum, without its import: the command-line parser loads this module
    return math.fsum(values) / len(values) if values else None
