"""What each metric is: its name, title, unit and format (:class:`Metric`), and what a
configuration's value of it is (:class:`Value`: a number, or why there is none).

:mod:`dltop.results.metrics` computes the values; the tables, the report and the TUI
read these definitions (all importable from there too).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from dltop.results.table import Millis, fmt_seconds

MIB = 1024 * 1024
READINGS = ("readings",)
"""The detail of a telemetry figure: the fewest readings behind it of any of its runs
(CSV gives it a column of its own; JSON cells also carry ``window_s``, the shortest)."""


def _g4(value: float) -> str:
    return fmt_seconds(value)


@dataclass(frozen=True)
class Metric:
    """One metric: its name on the command line, its title and unit."""

    name: str
    title: str
    """What the numbers are, with the unit (a table's title)."""
    unit: str
    header: str
    """Short column header, unit included."""
    fmt: Callable[[float], str]
    gpu: bool = False
    """Read from GPU telemetry: ``n/a: no GPU`` on CPU runs, ``simulated`` on fake GPUs."""
    detail: tuple[str, ...] = ()
    """Numbers of its :attr:`Value.extra` that CSV exports in columns of their own."""
    ms: Millis | None = None
    """Seconds that Markdown and LaTeX show in ms (:attr:`dltop.results.table.Column.ms`)."""


METRIC_LIST = (
    Metric("time", "median seconds per mini-batch", "s", "median s", _g4),
    Metric("mean-time", "mean seconds per mini-batch", "s", "mean s", _g4),
    Metric("throughput", "samples per second (total samples / total measured seconds)",
           "samples/s", "samples/s", lambda v: f"{v:.1f}"),
    Metric("power", "mean GPU power in W (sum over the run's GPUs)", "W", "power W",
           lambda v: f"{v:.1f}", gpu=True, detail=READINGS),
    Metric("energy", "energy in J per sample: the GPUs' on GPU runs, the CPU packages' and "
           "DRAM's (RAPL) on CPU runs", "J/sample", "J/sample", _g4, gpu=True,
           detail=READINGS),
    Metric("gpu-memory", "peak GPU memory of the run's processes in MiB", "MiB",
           "GPU mem MiB", lambda v: f"{v:.0f}", gpu=True, detail=READINGS),
    Metric("host-memory", "peak resident memory (RSS) in MiB: the larger of the kernel's "
           "(the largest process of the run's tree, exact) and the tree's sampled sum",
           "MiB", "RSS MiB", lambda v: f"{v:.0f}", detail=READINGS),
    Metric("cpu", "mean CPU of the run's process tree in % (100 = one core)", "%",
           "CPU %", lambda v: f"{v:.1f}", detail=READINGS),
    Metric("tflops", "achieved TFLOP/s (training FLOPs per sample × samples/s)",
           "TFLOP/s", "TFLOP/s", _g4),
    Metric("mfu", "model FLOPs utilisation in % (achieved ÷ peak for the precision)", "%",
           "MFU %", lambda v: f"{v:.1f}"),
)
CONVERGENCE_LIST = (
    Metric("accuracy", "test accuracy at the last evaluation (fraction of test samples)",
           "fraction", "accuracy", lambda v: f"{v:.4f}"),
    Metric("time-to-accuracy", "training seconds to the first evaluation at or above "
           "target_accuracy (evaluations excluded; their seconds in brackets)", "s",
           "TTA s", lambda v: f"{v:.4g}"),
    Metric("time-to-perplexity", "training seconds to the first evaluation at or below "
           "target_perplexity (evaluations excluded; their seconds in brackets)", "s",
           "TTP s", lambda v: f"{v:.4g}"),
    Metric("epoch-time", "median training seconds per epoch (evaluations excluded)", "s",
           "s/epoch", lambda v: f"{v:.4g}"),
    Metric("latency", "seconds per inference batch or generation request (end to end): "
           "p50 / p90 / p99", "s", "p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n"),
           ms=Millis.SUB_SECOND),
    Metric("perplexity", "test perplexity at the last evaluation (language model)", "",
           "perplexity", lambda v: f"{v:.2f}"),
    Metric("ttft", "time to first token in s (prefill and first token): p50 / p90 / p99",
           "s", "TTFT p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n"),
           ms=Millis.ALWAYS),
    Metric("tpot", "time per output token in s ((end to end - TTFT) / (new tokens - 1) "
           "per request): p50 / p90 / p99", "s", "TPOT p50/p90/p99 s", _g4,
           detail=("p90_s", "p99_s", "n"), ms=Millis.ALWAYS),
    Metric("itl", "inter-token latency in s (every decoded token): p50 / p90 / p99", "s",
           "ITL p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n"), ms=Millis.ALWAYS),
    Metric("decode-rate", "decoded tokens per second (batch × (new tokens - 1) / Σ ITL, "
           "prefill excluded)", "tokens/s", "decode tok/s", lambda v: f"{v:.1f}",
           detail=("n",)),
    Metric("mbu", "model bandwidth utilisation in % (bytes a decode step must move: weights, "
           "KV cache read and written; ÷ TPOT p50 ÷ the GPU's peak memory bandwidth)", "%",
           "MBU %", lambda v: f"{v:.1f}", detail=("achieved_tb_s",)),
    Metric("prefill-tflops", "achieved TFLOP/s of the prefill (its forward FLOPs, LM head "
           "at the last position; ÷ TTFT p50)", "TFLOP/s", "prefill TFLOP/s", _g4),
    Metric("req-rate", "requests per second completed (ok measured requests / the measured "
           "window; serve runs)", "req/s", "req/s", lambda v: f"{v:.2f}", detail=("asked",)),
    Metric("output-rate", "output tokens per second of a serve run's ok requests over its "
           "window", "tokens/s", "out tok/s", lambda v: f"{v:.1f}"),
    Metric("goodput", "requests per second meeting every SLO given (slo_ttft_ms, "
           "slo_tpot_ms, slo_e2e_ms)", "req/s", "goodput req/s", lambda v: f"{v:.2f}"),
    Metric("error-rate", "failed measured requests of a serve run in %", "%", "errors %",
           lambda v: f"{v:.1f}", detail=("failed", "n")),
    Metric("itl-chunk", "inter-chunk latency in s (every gap between streamed content "
           "chunks): p50 / p90 / p99", "s", "ITL/chunk p50/p90/p99 s", _g4,
           detail=("p90_s", "p99_s", "n")),
    Metric("dispatch-lag", "how late each request left past its scheduled arrival, in s: "
           "p50 / p90 / p99", "s", "lag p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n")),
    Metric("slot-wait", "time each request waited for a concurrency slot, in s: p50 / p90 / "
           "p99", "s", "slot wait p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n")),
    Metric("client-cpu", "the serve client's CPU over its window in % (100 = one core)", "%",
           "client CPU %", lambda v: f"{v:.1f}"),
    Metric("distinct-tokens", "distinct-token fraction of the generated tokens (each "
           "sequence's distinct ids / new tokens, over the measured requests): 1 / new "
           "tokens for a decoder repeating one token", "fraction", "distinct tok",
           lambda v: f"{v:.3f}"),
)
METRICS = {m.name: m for m in (*METRIC_LIST, *CONVERGENCE_LIST)}
"""By command-line name, in the order ``dltop export --metric`` lists them: the timed and
telemetry metrics (:data:`METRIC_LIST`, the TUI's metric switch), then those of
convergence and inference runs (:data:`CONVERGENCE_LIST`)."""

EXTRA = {
    "gpu-memory-device": Metric("gpu-memory-device", "peak memory used on the run's GPUs "
                                "(all processes) in MiB", "MiB", "GPU dev MiB",
                                lambda v: f"{v:.0f}", gpu=True, detail=READINGS),
    "host-cpu": Metric("host-cpu", "mean CPU of the whole host in %", "%", "host CPU %",
                       lambda v: f"{v:.1f}", detail=READINGS),
    "host-user": Metric("host-user", "host CPU in user mode in % of all CPUs", "%",
                        "host usr %", lambda v: f"{v:.1f}", detail=READINGS),
    "host-system": Metric("host-system", "host CPU in kernel mode in % of all CPUs", "%",
                          "host sys %", lambda v: f"{v:.1f}", detail=READINGS),
    "host-iowait": Metric("host-iowait", "host CPU idle waiting for I/O in % of all CPUs",
                          "%", "host iowait %", lambda v: f"{v:.1f}", detail=READINGS),
    # --flops no-embedding: torchtitan's count (results/lmcost.py)
    "tflops-no-embedding": Metric(
        "tflops-no-embedding", "achieved TFLOP/s, FLOPs without the embedding (torchtitan's "
        "convention) × samples/s", "TFLOP/s", "TFLOP/s (no emb.)", _g4),
    "mfu-no-embedding": Metric(
        "mfu-no-embedding", "model FLOPs utilisation in %, FLOPs without the embedding "
        "(torchtitan's convention) ÷ peak for the precision", "%", "MFU % (no emb.)",
        lambda v: f"{v:.1f}"),
}
"""Summary-table companions of ``gpu-memory`` and ``cpu`` (the host CPU and its split)."""

FLOPS_METRICS = ("tflops", "mfu")
"""The metrics whose FLOPs count follows ``--flops`` (nanogpt, the default, or no-embedding)."""


def with_flops(name: str, convention: str) -> str:
    """The metric ``name`` counts by FLOPs ``convention``: ``mfu`` with ``no-embedding`` is
    ``mfu-no-embedding``; any other metric, or ``nanogpt``, is ``name`` itself."""
    if name in FLOPS_METRICS and convention != "nanogpt":
        return f"{name}-{convention}"
    return name


HOST_SPLIT = {"host-user": "host_cpu_user_pct", "host-system": "host_cpu_system_pct",
              "host-iowait": "host_cpu_iowait_pct"}
"""The host CPU split's metrics and their ``runs`` columns (means over the measured window)."""


@dataclass(frozen=True)
class Value:
    """A configuration's value of a metric, or why there is none."""

    value: float | None
    reason: str = ""
    """Why ``value`` is ``None``: a status label, ``n/a: ...`` or ``simulated``."""
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


TIMED = ("time", "mean-time", "throughput", "tflops", "mfu", "tflops-no-embedding",
         "mfu-no-embedding", "time-to-accuracy", "time-to-perplexity",
         "epoch-time", "latency", "ttft", "tpot", "itl", "decode-rate", "mbu", "prefill-tflops")
"""Metrics computed from iteration times: the ones a noisy run (``*``) makes uncertain."""

CONVERGENCE = tuple(m.name for m in CONVERGENCE_LIST)
"""Metrics of convergence runs (evaluations), inference runs (latency) and generation
runs (latency, TTFT, TPOT, ITL, decode tokens/s)."""
GENERATION = ("ttft", "tpot", "itl", "decode-rate", "mbu", "prefill-tflops")
"""The metrics read from ``generations`` rows (:mod:`dltop.results.generation`); MBU and
prefill TFLOP/s with the shape's bytes and FLOPs (:mod:`dltop.results.lmcost`)."""
SERVING = ("req-rate", "output-rate", "goodput", "error-rate", "itl-chunk", "dispatch-lag",
           "slot-wait", "client-cpu")
"""The metrics of serve runs' requests and load (:mod:`dltop.results.serving`)."""


def mean_or_none(values: list[float]) -> float | None:
    """The mean of ``values``, or None for none."""
    return statistics.fmean(values) if values else None
