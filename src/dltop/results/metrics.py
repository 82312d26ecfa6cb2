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
from collections.abc import Callable, Sequence
from dataclasses import replace

# convmetrics: imported for its compute functions, which declare themselves (computes)
from dltop.results import convmetrics, lmcost, oversub  # noqa: F401
from dltop.results.aggregate import ConfigResult, RunRecord, floats
from dltop.results.metricdefs import (
    HOST_SPLIT,
    MIB,
    Value,
    check_computed,
    computes,
    metric,
)
from dltop.results.metricdefs import mean_or_none as _mean
from dltop.results.peaks import gpu_peak
from dltop.results.readings import Detail, readings_check
from dltop.telemetry.readings import idle_shortfall

MIXED_MARK = "~"
"""A cell whose runs ran under different dltop or framework versions."""
MIXED_FLAG = "mixed versions"
MIXED_NOTE = ("~ mixed versions: the cell merges runs of different dltop or framework "
              "versions (JSON's versions, the summary's flags say which): compare them "
              "apart before citing it.")


def markers(res: ConfigResult, metric_name: str = "time") -> str:
    """``*`` noisy (timed metrics only), ``†`` packed or shared, ``§`` contaminated,
    ``‡`` client-bound (a serve run's client fell behind its schedule), ``!``
    oversubscribed (:mod:`dltop.results.oversub`), ``~`` mixed versions (its runs ran
    under different dltop or framework versions: :attr:`ConfigResult.versions`)."""
    noisy = res.noisy and metric(metric_name).timed
    return ("*" if noisy else "") + ("†" if res.packed or res.shared else "") + \
        ("§" if res.contaminated else "") + ("‡" if res.client_bound else "") + \
        (oversub.MARK if res.oversubscribed else "") + (MIXED_MARK if res.versions else "")


def _host_value(res: ConfigResult, value: float | None) -> Value:
    """A host figure, unless its runs' windows hold too few host readings."""
    short, detail = readings_check(res, gpu=False)
    if short:
        return Value(None, short, extra=detail)
    if value is None:
        return Value(None, "n/a: not sampled", extra=detail)
    return Value(value, extra=detail)


def _gpu_value(res: ConfigResult, value: float | None, source: str = "") -> Value:
    """A GPU figure, unless the runs are not on GPUs, too few readings stand behind it, it
    was not sampled, or it came from simulated GPUs."""
    if res.device_kind != "gpu":
        return Value(None, "n/a: no GPU")
    short, detail = readings_check(res, gpu=True)
    if short:  # before "not sampled": a window without readings has no value either
        return Value(None, short, extra=detail)
    if value is None:
        return Value(None, "n/a: not sampled", extra=detail)
    if any(r.simulated for r in res.runs):
        return Value(None, "simulated", simulated_value=value, extra=detail)
    return Value(value, source=source, extra=detail)


@computes("power")
def _power(res: ConfigResult) -> Value:
    val = _gpu_value(res, _mean(floats(res.runs, "power_mean_w")))
    idle, _ = _idle_w(res.runs)
    if val.value is None or idle is None:
        return val
    host = _mean(floats(res.runs, "cpu_idle_power_w"))  # RAPL, where the host has it
    return replace(val, suffix=f" (idle {idle:.0f} W before the load"
                   + (f"; host CPU {host:.0f} W)" if host is not None else ")"),
                   extra=(*val.extra, ("idle_power_w", idle), ("cpu_idle_power_w", host)))


def _idle_w(runs: Sequence[RunRecord]) -> tuple[float | None, str]:
    """Mean over serve runs of their idle power before the load, or why there is none
    (:func:`~dltop.telemetry.readings.idle_shortfall` of the weakest run)."""
    for r in runs:
        why = idle_shortfall(r.get("idle_window_s"), r.get("idle_readings"))
        if why is not None:
            return None, why
    return _mean(floats(runs, "idle_power_w")), ""


def _per_serve_output(tokens: bool) -> Callable[[ConfigResult], Value]:
    """J per output token (``tokens``) or per ok request of serve runs, the net of idle
    power beside it: (energy - idle power × window) / the same count."""
    def compute(res: ConfigResult) -> Value:
        mode = res.identity.get("mode", "train")
        if mode != "serve":  # the other serving metrics' words
            return Value(None, "n/a: training run" if mode == "train" else f"n/a: {mode} run")
        per, net = [], []
        for r in res.runs:
            ok = [q for q in r.serving if q.ok]
            n = sum(q.output_tokens for q in ok) if tokens else len(ok)
            energy, idle, window = (r.get(c) for c in ("energy_j", "idle_power_w", "window_s"))
            if energy is not None and n:
                per.append(float(energy) / n)
                if idle is not None and window is not None:
                    net.append((float(energy) - float(idle) * float(window)) / n)
        val = _gpu_value(res, _mean(per))
        idle_w, why = _idle_w(res.runs)
        net_j = _mean(net) if idle_w is not None and len(net) == len(per) else None
        shown = why or (f"{net_j:.4g}" if net_j is not None else "n/a")
        return replace(val, suffix=f" (net {shown})",
                       extra=(*val.extra, ("net_j", net_j), ("idle_power_w", idle_w)))
    return compute


computes("j-per-token")(_per_serve_output(tokens=True))
computes("j-per-request")(_per_serve_output(tokens=False))


@computes("energy")
def _energy(res: ConfigResult) -> Value:
    if res.device_kind != "gpu":
        return _cpu_energy(res)
    val = _gpu_value(res, _mean(floats(res.runs, "joules_per_sample")))
    if val.value is None:
        return val
    bound = _bound_per_sample(res.runs, "joules_per_sample", "energy_bound_j", ("energy_j",))
    return _with_idle(_with_bound(val.value, bound, val.extra), res.runs)


@computes("gpu-memory-device")
def _gpu_memory_device(res: ConfigResult) -> Value:
    peaks = floats(res.runs, "gpu_mem_peak_bytes")
    return _gpu_value(res, max(peaks) / MIB if peaks else None)


@computes("gpu-memory")
def _gpu_memory(res: ConfigResult) -> Value:
    """The run's processes' peak, else (not visible to NVML) the device's, marked."""
    own = floats(res.runs, "gpu_mem_run_peak_bytes")
    dev = floats(res.runs, "gpu_mem_peak_bytes")
    val = _gpu_value(res, max(own) / MIB if own else (max(dev) / MIB if dev else None),
                     "" if own or not dev else "device")
    framework = floats(res.runs, "gpu_mem_framework_peak_bytes")
    if val.value is None or not framework:
        return val
    # The framework's own peak (tensors only) rides in the detail, beside NVML's figure.
    return replace(val, extra=(*val.extra, ("framework_mib", max(framework) / MIB)))


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


def _with_idle(val: Value, runs: Sequence[RunRecord]) -> Value:
    """GPU J/sample with the idle power of the same GPUs beside it, ``(idle 127 W before,
    136 W during)``: each run's ``start_power_w`` (its GPUs' highest power just before it
    started: their idle draw, or more when the run before left them warm) and its mean
    power, means over the runs; left as is unless every run has both."""
    idle = [r.get("start_power_w") for r in runs]
    power = [r.get("power_mean_w") for r in runs]
    if not runs or any(v is None for v in (*idle, *power)):
        return val
    idle_w = statistics.fmean(float(v) for v in idle if v is not None)
    power_w = statistics.fmean(float(v) for v in power if v is not None)
    return replace(val, suffix=f"{val.suffix} (idle {idle_w:.0f} W before, {power_w:.0f} W "
                   "during)", extra=(*val.extra, ("idle_power_w", idle_w), ("power_w", power_w)))


def _cpu_energy(res: ConfigResult) -> Value:
    """A CPU configuration's J/sample from RAPL (package + DRAM), or the runs' reason.

    RAPL is read on the GPU tick while a run is active, but a host figure's rule (the
    window's length and its host readings) decides whether the window can carry it."""
    value = _mean(floats(res.runs, "cpu_joules_per_sample"))
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


def tflops(res: ConfigResult, convention: str = lmcost.NANOGPT) -> Value:
    """Achieved TFLOP/s: the runner's training FLOPs per sample × samples per second, the
    FLOPs counted by ``convention`` (:mod:`dltop.results.lmcost`; the runners report
    nanoGPT's)."""
    flops = floats(res.runs, "flops_per_sample")
    if not flops or res.samples_per_s is None:
        return Value(None, "n/a: no FLOPs count")
    return Value(flops[0] * lmcost.flops_scale(res, convention) * res.samples_per_s / 1e12)


def mfu(res: ConfigResult, convention: str = lmcost.NANOGPT) -> Value:
    """Achieved TFLOP/s over the peak of the configuration's devices at its precision, in %."""
    achieved = tflops(res, convention)
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


computes("tflops")(lambda res: tflops(res, lmcost.NANOGPT))
computes("tflops-no-embedding")(lambda res: tflops(res, lmcost.NO_EMBEDDING))
computes("mfu")(lambda res: mfu(res, lmcost.NANOGPT))
computes("mfu-no-embedding")(lambda res: mfu(res, lmcost.NO_EMBEDDING))
computes("time")(lambda res: _or_na(res.median_s))
computes("mean-time")(lambda res: _or_na(_mean(floats(res.runs, "mean_s"))))
computes("throughput")(lambda res: _or_na(res.samples_per_s))
computes("cpu")(lambda res: _host_value(res, _mean([r.tree_cpu_mean_pct for r in res.runs
                                                    if r.tree_cpu_mean_pct is not None])))


def _host_mean(column: str) -> Callable[[ConfigResult], Value]:
    """A host figure: the mean over the runs of their ``runs`` column."""
    return lambda res: _host_value(res, _mean(floats(res.runs, column)))


for _name, _column in (("host-cpu", "host_cpu_mean_pct"), *HOST_SPLIT.items()):
    computes(_name)(_host_mean(_column))


@computes("host-memory")
def _host_memory(res: ConfigResult) -> Value:
    """Both are lower bounds of the tree's peak: the larger wins."""
    kernel = floats(res.runs, "rss_peak_kernel_bytes")
    sampled = floats(res.runs, "rss_peak_bytes")
    if kernel:  # exact whatever the window: the readings rule judges samples only
        short, detail = readings_check(res, gpu=False)
        peaks = kernel + ([] if short else sampled)
        return Value(max(peaks) / MIB, extra=detail)
    return _host_value(res, max(sampled) / MIB if sampled else None)


check_computed()  # this module and convmetrics declared every metric's function


def value_of(res: ConfigResult, name: str) -> Value:
    """The configuration's value of metric ``name``, or why there is none.

    Raises:
        ValueError: an unknown metric.
    """
    m = metric(name)
    if not res.runs:
        return Value(None, res.label)
    return m.compute(res)


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
