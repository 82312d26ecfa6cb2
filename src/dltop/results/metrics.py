"""Every metric a results table shows, computed per configuration from stored runs.

A configuration's value of a metric comes from its ok runs (the latest attempt
of each repeat): times and throughput take the median over runs (the paper's
cell), means (power, energy, CPU) the mean over runs, peaks (memory) the
maximum. A value that cannot be given says why instead (:attr:`Value.reason`):
the configuration's status (``OOM``...), ``n/a: no GPU`` for a GPU metric of a
CPU run, ``n/a: not sampled`` when telemetry was off, ``n/a: unknown peak``
for MFU on a GPU the peak table lacks, and ``simulated`` for a GPU reading of
simulated GPUs (``--fake-gpus``), whose number is kept only as
:attr:`Value.simulated_value` so that it never appears unmarked.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dltop.results import convergence as conv
from dltop.results import generation as gen
from dltop.results.aggregate import ConfigResult, RunRecord
from dltop.results.peaks import gpu_peak
from dltop.results.readings import Detail, readings_check
from dltop.results.table import fmt_seconds

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
           "p50 / p90 / p99", "s", "p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n")),
    Metric("perplexity", "test perplexity at the last evaluation (language model)", "",
           "perplexity", lambda v: f"{v:.2f}"),
    Metric("ttft", "time to first token in s (prefill and first token): p50 / p90 / p99",
           "s", "TTFT p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n")),
    Metric("tpot", "time per output token in s ((end to end - TTFT) / (new tokens - 1) "
           "per request): p50 / p90 / p99", "s", "TPOT p50/p90/p99 s", _g4,
           detail=("p90_s", "p99_s", "n")),
    Metric("itl", "inter-token latency in s (every decoded token): p50 / p90 / p99", "s",
           "ITL p50/p90/p99 s", _g4, detail=("p90_s", "p99_s", "n")),
    Metric("decode-rate", "decoded tokens per second (batch × (new tokens - 1) / Σ ITL, "
           "prefill excluded)", "tokens/s", "decode tok/s", lambda v: f"{v:.1f}",
           detail=("n",)),
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
}
"""Summary-table companions of ``gpu-memory`` and ``cpu`` (the host CPU and its split)."""

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


TIMED = ("time", "mean-time", "throughput", "tflops", "mfu", "time-to-accuracy",
         "time-to-perplexity",
         "epoch-time", "latency", "ttft", "tpot", "itl", "decode-rate")
"""Metrics computed from iteration times: the ones a noisy run (``*``) makes uncertain."""


def markers(res: ConfigResult, metric_name: str = "time") -> str:
    """``*`` noisy (timed metrics only), ``†`` packed or shared, ``§`` contaminated."""
    noisy = res.noisy and metric_name in TIMED
    return ("*" if noisy else "") + ("†" if res.packed or res.shared else "") + \
        ("§" if res.contaminated else "")


def _floats(runs: Iterable[RunRecord], field: str) -> list[float]:
    return [float(v) for v in (r.get(field) for r in runs) if v is not None]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _host_value(res: ConfigResult, value: float | None) -> Value:
    """A host figure, unless its runs' windows hold too few host readings."""
    short, detail = readings_check(res, gpu=False)
    if short:
        return Value(None, short, extra=detail)
    if value is None:
        return Value(None, "n/a: not sampled", extra=detail)
    return Value(value, extra=detail)


def _gpu_value(res: ConfigResult, name: str) -> Value:
    runs = res.runs
    if res.device_kind != "gpu" and name == "energy":
        return _cpu_energy(res)
    if res.device_kind != "gpu":
        return Value(None, "n/a: no GPU")
    short, detail = readings_check(res, gpu=True)
    if short:  # before "not sampled": a window without readings has no value either
        return Value(None, short, extra=detail)
    source = ""
    if name == "power":
        value = _mean(_floats(runs, "power_mean_w"))
    elif name == "energy":
        value = _mean(_floats(runs, "joules_per_sample"))
        bound = _bound_per_sample(runs, "joules_per_sample", "energy_bound_j", ("energy_j",))
    elif name == "gpu-memory-device":
        peaks = _floats(runs, "gpu_mem_peak_bytes")
        value = max(peaks) / MIB if peaks else None
    else:  # gpu-memory: the run's processes, else (not visible to NVML) the device peak
        own = _floats(runs, "gpu_mem_run_peak_bytes")
        dev = _floats(runs, "gpu_mem_peak_bytes")
        value = max(own) / MIB if own else (max(dev) / MIB if dev else None)
        source = "" if own or not dev else "device"
    if value is None:
        return Value(None, "n/a: not sampled", extra=detail)
    if any(r.simulated for r in runs):
        return Value(None, "simulated", simulated_value=value, extra=detail)
    if name == "energy":
        return _with_bound(value, bound, detail)
    framework = _floats(runs, "gpu_mem_framework_peak_bytes") if name == "gpu-memory" else []
    # The framework's own peak (tensors only) rides in the detail, beside NVML's figure.
    extra = (("framework_mib", max(framework) / MIB),) if framework else ()
    return Value(value, source=source, extra=detail + extra)


def _bound_per_sample(runs: Sequence[RunRecord], per_sample: str, bound: str,
                      energy: tuple[str, ...]) -> float | None:
    """Mean over the runs of each one's energy bound in J/sample (None unless every run has one)."""
    out = []
    for r in runs:
        jps, b = r.get(per_sample), r.get(bound)
        joules = sum(float(r.get(c) or 0.0) for c in energy)
        if jps is None or b is None or joules <= 0:
            return None
        out.append(float(jps) * float(b) / joules)
    return _mean(out)


def _with_bound(value: float, bound: float | None, detail: Detail) -> Value:
    """J/sample with its error bound beside it (``0.5012 ±0.003``) and in the detail."""
    if bound is None:
        return Value(value, extra=detail)
    return Value(value, suffix=f" ±{bound:.2g}",
                 extra=(*detail, ("bound_j_per_sample", bound)))


def _cpu_energy(res: ConfigResult) -> Value:
    """A CPU configuration's J/sample from RAPL (package + DRAM), or the runs' reason.

    RAPL is read on the GPU tick while a run is active, but a host figure's rule (the
    window's length and its host readings) decides whether the window can carry it."""
    value = _mean(_floats(res.runs, "cpu_joules_per_sample"))
    short, detail = readings_check(res, gpu=False)
    if value is not None and short:
        return Value(None, short, extra=detail)
    if value is not None:
        return _with_bound(value, _bound_per_sample(
            res.runs, "cpu_joules_per_sample", "cpu_energy_bound_j",
            ("cpu_energy_j", "dram_energy_j")), detail)
    notes = [str(r.get("cpu_energy_note")) for r in res.runs if r.get("cpu_energy_note")]
    if not notes:
        return Value(None, "n/a: not sampled")
    # A cell says which case; the run's note (exports, run detail) names the file.
    for words, short in (("permission denied", "n/a: RAPL root-only"),
                         ("no RAPL", "n/a: no RAPL"), ("backwards", "n/a: RAPL fault"),
                         ("not a counter", "n/a: RAPL fault")):
        if words in notes[0]:
            return Value(None, short)
    return Value(None, notes[0])


def tflops(res: ConfigResult) -> Value:
    """Achieved TFLOP/s: the runner's training FLOPs per sample × samples per second."""
    flops = _floats(res.runs, "flops_per_sample")
    if not flops or res.samples_per_s is None:
        return Value(None, "n/a: no FLOPs count")
    return Value(flops[0] * res.samples_per_s / 1e12)


def mfu(res: ConfigResult) -> Value:
    """Achieved TFLOP/s over the peak of the configuration's devices at its precision, in %."""
    achieved = tflops(res)
    if achieved.value is None:
        return achieved
    if res.device_kind != "gpu":
        return Value(None, "n/a: CPU peak unknown")
    names = [str(r.get("device_name")) for r in res.runs if r.get("device_name")]
    entry = gpu_peak(names[0] if names else None)
    if entry is None:
        return Value(None, "n/a: unknown peak")
    peak = entry.tflops.get(res.precision)
    if peak is None:
        return Value(None, f"n/a: no {res.precision} peak")
    return Value(100.0 * achieved.value / (peak * res.device_count))


def value_of(res: ConfigResult, name: str) -> Value:
    """The configuration's value of metric ``name``, or why there is none.

    Raises:
        ValueError: an unknown metric.
    """
    m = metric(name)
    if not res.runs:
        return Value(None, res.label)
    if m.gpu:
        return _gpu_value(res, name)
    if name == "time":
        return _or_na(res.median_s)
    if name == "mean-time":
        return _or_na(_mean(_floats(res.runs, "mean_s")))
    if name == "throughput":
        return _or_na(res.samples_per_s)
    if name == "host-memory":  # both are lower bounds of the tree's peak: the larger wins
        kernel = _floats(res.runs, "rss_peak_kernel_bytes")
        sampled = _floats(res.runs, "rss_peak_bytes")
        if kernel:  # exact whatever the window: the readings rule judges samples only
            short, detail = readings_check(res, gpu=False)
            peaks = kernel + ([] if short else sampled)
            return Value(max(peaks) / MIB, extra=detail)
        return _host_value(res, max(sampled) / MIB if sampled else None)
    if name == "cpu":
        return _host_value(res, _mean([r.tree_cpu_mean_pct for r in res.runs
                                       if r.tree_cpu_mean_pct is not None]))
    if name == "host-cpu":
        return _host_value(res, _mean(_floats(res.runs, "host_cpu_mean_pct")))
    if name in HOST_SPLIT:
        return _host_value(res, _mean(_floats(res.runs, HOST_SPLIT[name])))
    if name == "tflops":
        return tflops(res)
    if name in CONVERGENCE:
        return convergence_value(res, name)
    return mfu(res)


CONVERGENCE = tuple(m.name for m in CONVERGENCE_LIST)
"""Metrics of convergence runs (evaluations), inference runs (latency) and generation
runs (latency, TTFT, TPOT, ITL, decode tokens/s)."""
GENERATION = ("ttft", "tpot", "itl", "decode-rate")
"""The metrics read from ``generations`` rows (:mod:`dltop.results.generation`)."""


def convergence_value(res: ConfigResult, name: str) -> Value:
    """Accuracy and perplexity (means over the ok runs of the last evaluation's),
    time-to-accuracy and epoch time (medians over runs), latency percentiles (over the
    measured iterations of every ok run together)."""
    runs = res.runs
    if name == "latency":
        if res.identity.get("mode", "train") not in ("inference", "generate"):
            return Value(None, "n/a: training run")
        seconds = [s for r in runs for s, _ in r.iterations]
        lat = conv.latency(seconds)
        if lat is None:
            return Value(None, "n/a: not sampled")
        return _percentiles(lat, len(seconds))
    if name in GENERATION:
        return generation_value(res, name)
    evaluated = [r for r in runs if r.evals]
    if not evaluated:
        return Value(None, "n/a: no evaluations")
    if name == "accuracy":
        accs = [a for a in (conv.final_accuracy(r.evals) for r in evaluated) if a is not None]
        return Value(_mean(accs)) if accs else Value(None, "n/a: no accuracy (perplexity)")
    if name == "perplexity":
        ppl = [p for p in (conv.final_perplexity(r.evals) for r in evaluated) if p is not None]
        return Value(_mean(ppl)) if ppl else Value(None, "n/a: no perplexity")
    if name == "epoch-time":
        times = [t for t in (conv.epoch_time(r.evals) for r in evaluated) if t is not None]
        return Value(statistics.median(times)) if times else Value(None, "n/a: no epochs")
    if name == "time-to-perplexity":
        return _time_to(res, [(r, r.target_perplexity) for r in evaluated],
                        conv.time_to_perplexity, "target_perplexity")
    return _time_to(res, [(r, r.target_accuracy) for r in evaluated],
                    conv.time_to_accuracy, "target_accuracy")


def _percentiles(p: gen.Percentiles, n: int) -> Value:
    p50, p90, p99 = p
    return Value(p50, suffix=f" / {_g4(p90)} / {_g4(p99)} (n {n})",
                 extra=(("p50_s", p50), ("p90_s", p90), ("p99_s", p99), ("n", float(n))))


def generation_value(res: ConfigResult, name: str) -> Value:
    """TTFT, TPOT and ITL percentiles over the measured requests (latencies) of every ok
    run together (``n``: requests, or latencies for ITL); decode tokens/s: the median
    over runs of each run's rate. ``n/a`` with the reason for a run without requests."""
    mode = res.identity.get("mode", "train")
    if mode != "generate":  # the latency metric's words for a training run
        return Value(None, "n/a: training run" if mode == "train" else f"n/a: {mode} run")
    requests = [q for r in res.runs for q in r.generations]
    if not requests:
        return Value(None, "n/a: no generation requests stored")
    if name == "decode-rate":
        rates = [x for x in (gen.decode_rate(r.generations) for r in res.runs)
                 if x is not None]
        if not rates:
            return Value(None, "n/a: one token per request")
        return Value(statistics.median(rates), extra=(("n", float(len(rates))),))
    st = gen.stats(requests)
    if st is None:
        return Value(None, "n/a: no generation requests stored")
    if name == "ttft":
        return _percentiles(st.ttft_s, st.requests)
    if name == "tpot":
        return _percentiles(st.tpot_s, st.requests) if st.tpot_s is not None \
            else Value(None, "n/a: one token per request")
    return _percentiles(st.itl_s, st.n_itl) if st.itl_s is not None \
        else Value(None, "n/a: one token per request")


def _time_to(res: ConfigResult, targets: list[tuple[RunRecord, float | None]],
             reach: Callable[[Sequence[conv.EvalPoint], float], conv.Reached | None],
             key: str) -> Value:
    """Time to accuracy or to perplexity: the median training seconds over the runs
    that reached their target (``reach``), the evaluations' seconds apart."""
    aimed = [(r, t) for r, t in targets if t is not None]
    if not aimed:
        return Value(None, f"n/a: no {key}")
    reached = [x for x in (reach(r.evals, float(t)) for r, t in aimed) if x is not None]
    if not reached:
        return Value(None, "not reached")
    train = statistics.median(x.train_s for x in reached)
    evals = statistics.median(x.eval_s for x in reached)
    suffix = f" (eval {evals:.3g})"
    if len(reached) < len(res.runs):
        suffix += f" ({len(reached)}/{len(res.runs)} reached)"
    return Value(train, suffix=suffix,
                 extra=(("eval_s", evals), ("reached", float(len(reached)))))


def host_split_text(res: ConfigResult) -> str:
    """``host us 41.0 sy 5.2 wa 0.3``: the configuration's host user/system/iowait means
    (``n/a`` for a part not sampled); empty when none of them was."""
    values = [value_of(res, name).value for name in HOST_SPLIT]
    if all(v is None for v in values):
        return ""
    return "host " + " ".join(f"{label} {'n/a' if v is None else f'{v:.1f}'}"
                              for label, v in zip(("us", "sy", "wa"), values, strict=True))


def _or_na(value: float | None) -> Value:
    return Value(value) if value is not None else Value(None, "n/a: not sampled")
