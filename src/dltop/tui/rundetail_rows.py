"""The run detail's rows of figures: timing statistics and telemetry, each value with
the group whose reason explains it when missing (:mod:`dltop.tui.rundetail` lays
them out)."""

from __future__ import annotations

from dataclasses import replace

from dltop.live.nodegpus import node_gpu_lines
from dltop.live.rundetail import RunDetail, RunStats, StoredTelemetry, cpu_energy_text
from dltop.results.tokens import is_lm
from dltop.tui.format import gib, num, per_iteration, per_request, size

Row = tuple[str, str | None, str]
"""(key, value or None when missing, the group whose reason explains a missing value)."""


def stats_rows(s: RunStats, model: str = "", serve: bool = False) -> list[Row]:
    """The run's timing statistics (throughput in tokens/s for a transformer ``model``).
    A ``serve`` run's are its requests' end-to-end latencies (ms/req), with no samples/s
    or loss: latency over a request's tokens is no throughput (req-rate, output-rate)."""
    p = None
    seconds = per_request if serve else per_iteration
    if s.p10_s is not None and s.p90_s is not None:
        lo, hi = seconds(s.p10_s), seconds(s.p90_s)
        unit = hi.split(" ", 1)[1]
        p = f"{lo.removesuffix(' ' + unit)} / {hi}"  # 480.0 / 550.0 ms/it
    median = ("n", None if s.n_iterations is None else str(s.n_iterations), "stats"), (
        "median", None if s.median_s is None else seconds(s.median_s), "stats")
    if serve:
        return [*median, ("within-run p10 / p90", p, "stats"),
                ("cv", num(s.cv, ".3f") if s.cv is not None else None, "stats")]
    return [*median,
            ("within-run p10 / p90", p, "stats"),
            ("cv", num(s.cv, ".3f") if s.cv is not None else None, "stats"),
            ("noisy", None if s.noisy is None else ("yes" if s.noisy else "no"), "stats"),
            ("tokens/s" if is_lm(model) else "samples/s",
             num(s.samples_per_s, ".1f") if s.samples_per_s else None, "stats"),
            ("final loss", num(s.final_loss, ".4g") if s.final_loss is not None else None,
             "stats")]


def _opt(value: float | int | None, fmt: str, unit: str = "") -> str | None:
    return None if value is None else f"{value:{fmt}}{unit}"


def _window(m: StoredTelemetry) -> str | None:
    """``12.4 s, 124 GPU / 25 host readings`` (the counts behind the figures above)."""
    if m.window_s is None:
        return None
    counts = [f"{n} {what}" for n, what in ((m.gpu_readings, "GPU"),
                                            (m.host_readings, "host")) if n is not None]
    seconds = f"{m.window_s:.1f}" if m.window_s >= 1 else f"{m.window_s:.2g}"
    return f"{seconds} s" + (f", {' / '.join(counts)} readings" if counts else "")


def telemetry_rows(d: RunDetail) -> list[Row]:
    """The run's telemetry summary (the ``runs`` columns)."""
    m = d.telemetry
    if m.short("gpu", d.serve):  # too few readings: the GPU rows give that reason, no number
        m = replace(m, gpu_util_mean_pct=None, power_mean_w=None, energy_j=None,
                    joules_per_sample=None, gpu_mem_peak_bytes=None)
    host_short = m.short("telemetry", d.serve)
    if host_short:  # the kernel's peak RSS is exact whatever the window: it stays
        m = replace(m, host_cpu_mean_pct=None, tree_cpu_mean_pct=None, rss_peak_bytes=None,
                    cpu_energy_j=None, dram_energy_j=None, cpu_joules_per_sample=None,
                    cpu_energy_note=None if m.cpu_energy_j is None else f"n/a: {host_short}")
    util = None if m.gpu_util_mean_pct is None else \
        f"{m.gpu_util_mean_pct:.0f} / {num(m.gpu_util_peak_pct, '.0f')} %"
    bound = "" if m.energy_bound_j is None else f" ±{m.energy_bound_j:.2g}"
    energy = None if m.energy_j is None else \
        f"{m.energy_j:.1f}{bound} J ({m.energy_source or 'source unknown'})"
    mem = None if m.gpu_mem_peak_bytes is None else \
        f"{gib(m.gpu_mem_peak_bytes)} GiB (run {gib(m.gpu_mem_run_peak_bytes)}" + (
            "" if m.gpu_mem_framework_peak_bytes is None
            else f", framework {gib(m.gpu_mem_framework_peak_bytes)}") + ")"
    rss = None if m.rss_peak_bytes is None and m.rss_peak_kernel_bytes is None else \
        size(m.rss_peak_bytes) + ("" if m.rss_peak_kernel_bytes is None else
                                  f" (kernel {size(m.rss_peak_kernel_bytes)})")
    throttle = m.throttle_reasons or ("none" if d.uses_gpu and m.window_s else None)
    contaminated = None if m.contaminated is None else \
        ("yes: " + (m.contamination or "") if m.contaminated else "no")
    rows: list[Row] = [
        ("gpu util", util, "gpu"), ("power mean", _opt(m.power_mean_w, ".1f", " W"), "gpu"),
        ("energy", energy, "gpu"), ("J/sample", _opt(m.joules_per_sample, ".4g"), "gpu"),
        ("gpu mem peak", mem, "gpu"), ("throttle", throttle, "gpu"),
        ("host cpu", _opt(m.host_cpu_mean_pct, ".1f", " %"), "telemetry"),
        ("tree cpu", _opt(m.tree_cpu_mean_pct, ".0f", " % (100 = 1 core)"), "telemetry"),
        ("rss peak", rss, "telemetry"),
        ("contaminated", contaminated, "telemetry"),
        ("simulated", None if m.telemetry_simulated is None else
         ("yes (fake GPUs)" if m.telemetry_simulated else "no"), "telemetry"),
        ("window", _window(m), "telemetry"),
        ("run energy", _opt(m.energy_run_j, ".1f", " J"), "gpu")]
    cpu_energy = cpu_energy_text(m)
    if cpu_energy is not None:  # runs stored before RAPL was read have neither figure nor note
        at = rows.index(("rss peak", rss, "telemetry")) + 1
        rows[at:at] = [("cpu energy", cpu_energy, "telemetry")]
    if m.page_faults_per_step is not None:  # runs stored before it was counted have none
        at = rows.index(("rss peak", rss, "telemetry")) + 1
        rows[at:at] = [("page faults", f"{m.page_faults_per_step:.0f} / measured step",
                        "telemetry")]
    rows.extend((label, text, "gpu") for label, text in node_gpu_lines(d.node_gpus))
    if m.telemetry_read_errors:
        rows.append(("read errors", str(m.telemetry_read_errors), "telemetry"))
    if m.telemetry_note:
        rows.append(("note", m.telemetry_note, "telemetry"))
    return rows
