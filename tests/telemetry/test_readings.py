"""Figures that refuse to guess (issue 30, item 2): every telemetry figure states the
readings behind it, and below the documented minimum its cell is ``n/a`` with the window
and the count, in the exports, the summary and the run detail.

Summaries come from a real :class:`RunAccumulator` fed by the FAKE GPU backend
(``telemetry/fake.py``, labelled simulated) on a scripted clock, and are stored in a real
SQLite database through the store, as the engine stores them.
"""

from __future__ import annotations

import json

import pytest
import sqlite_utils

from dltop.live.rundetail import read_run_detail
from dltop.profiles.loader import parse
from dltop.report.data import energy_figure
from dltop.results import export, identity
from dltop.results.aggregate import config_results
from dltop.results.metrics import value_of
from dltop.results.places import placed_identities
from dltop.results.readings import check_runs
from dltop.results.render import render
from dltop.results.stats import summarize_run
from dltop.store import Store, memory_db
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.nodestats import NodeGpuRow, NodeHostRow, summarize
from dltop.telemetry.readings import (
    MIN_GPU_READINGS,
    MIN_HOST_READINGS,
    MIN_WINDOW_S,
    gpu_shortfall,
    host_shortfall,
)
from dltop.telemetry.runstats import RunAccumulator
from dltop.telemetry.values import HostSample, RunTelemetry, TreeSample
from dltop.tui.rundetail_rows import telemetry_rows

from .traces import LinearTrace

MS = 1_000_000  # ns per millisecond
WARM_END_MS = 500


# the rule --------------------------------------------------------------------------------
def test_the_documented_thresholds() -> None:
    # docs/metrics.md states these; a change must change the docs too
    assert (MIN_WINDOW_S, MIN_GPU_READINGS, MIN_HOST_READINGS) == (1.0, 10, 2)


@pytest.mark.parametrize(("window_s", "readings", "want"), [
    (0.04, 0, "n/a: window 0.04 s, 0 readings (set min_time_s)"),
    (0.0412, 1, "n/a: window 0.041 s, 1 reading (set min_time_s)"),
    (0.99, 10, "n/a: window 0.99 s, 10 readings (set min_time_s)"),  # short, however many
    (5.0, 9, "n/a: window 5 s, 9 readings (set min_time_s)"),  # a slow sampler: lengthen
    (12.0, 0, "n/a: window 12 s, 0 readings (no reading arrived)"),  # no hint that fails
    (0.5, None, "n/a: window 0.5 s, readings not counted (set min_time_s)"),  # older run
    (1.0, 10, None), (12.0, None, None), (None, 0, None),  # enough; old and long; no window
])
def test_gpu_rule(window_s: float | None, readings: int | None, want: str | None) -> None:
    assert gpu_shortfall(window_s, readings) == want


def test_host_rule_counts_tick_means() -> None:
    assert host_shortfall(1.0, 2) is None
    assert host_shortfall(1.0, 1) == "n/a: window 1 s, 1 reading (set min_time_s)"
    assert host_shortfall(0.9, 5) is not None


# the accumulator's counts ------------------------------------------------------------------
def _summary(window_ms: int, gpus: int = 1) -> RunTelemetry:
    """A run on ``gpus`` FAKE GPUs read at 10 Hz (host 2 Hz) from 0 to 4 s; warm-up ends at
    0.5 s, the measured window lasts ``window_ms``."""
    now = [0]
    fake = FakeGpuBackend(gpus, LinearTrace(p0_w=100.0, slope_w_per_s=0.0, util_pct=60.0),
                          clock_ns=lambda: now[0])
    acc = RunAccumulator(1, 4242, tuple(range(gpus)))
    acc.iteration(WARM_END_MS * MS, 0.5, True)
    acc.iteration((WARM_END_MS + window_ms) * MS, window_ms / 1000, False)
    for k in range(41):  # readings every 100 ms, on integer ns: no boundary rounding
        now[0] = k * 100 * MS
        for i in range(gpus):
            acc.add_gpu(fake.sample(i, slow=False))
        if k % 5 == 0:
            tree = TreeSample(4242, 1, frozenset({4242}), 100.0, 1000 + k, 1)
            acc.add_host(HostSample(now[0], (50.0,), None, 1, 2, 0, tree))
    return acc.summary(samples=64)


def test_a_window_shorter_than_a_tick_counts_its_one_reading() -> None:
    t = _summary(40)
    assert (t.window_s, t.gpu_readings, t.host_readings) == (0.04, 1, 1)
    assert t.power_mean_w == 100.0  # one reading gives a number: the rule must refuse it
    assert gpu_shortfall(t.window_s, t.gpu_readings) == \
        "n/a: window 0.04 s, 1 reading (set min_time_s)"


def test_a_long_window_counts_every_reading_per_gpu() -> None:
    t = _summary(2000, gpus=2)
    # readings at 0.5, 0.6, ..., 2.5 s: 21 per GPU; host at 0.5, 1.0, ..., 2.5 s: 5
    assert (t.window_s, t.gpu_readings, t.host_readings, t.gpu_samples) == (2.0, 21, 5, 42)
    assert gpu_shortfall(t.window_s, t.gpu_readings) is None
    assert host_shortfall(t.window_s, t.host_readings) is None


# stored, exported, shown -------------------------------------------------------------------
PROFILE = """
name = "readings"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [64]
devices = ["gpu:1"]
"""
WINDOW_MS = {"fcn-r": 40, "alexnet-r": 2000}
"""fcn-r's window is far shorter than a tick; alexnet-r's holds enough readings."""


def _campaign() -> tuple[sqlite_utils.Database, int, dict[str, int]]:
    db = memory_db()
    store = Store(db)
    jobs = parse(PROFILE, "r.toml", "r").jobs
    cid = store.create_campaign("readings", ["r.toml"], ["dltop"], "host-1", 1, None)
    runs = {}
    for job, job_id in zip(jobs, store.add_jobs(cid, jobs), strict=True):
        run_id = store.start_run(job_id, cid, 1, "", 64)
        seconds = [0.02, 0.02]
        store.add_iterations(run_id, [{"idx": i, "seconds": s, "samples": 64, "warmup": 0,
                                       "loss": None} for i, s in enumerate(seconds)])
        store.finish_run(run_id, job_id, "ok", {**summarize_run(seconds, 64).to_columns(),
                                                "device_name": "NVIDIA H100 80GB HBM3",
                                                "gpu_indices": "0"})
        store.telemetry.write_run_telemetry(run_id, _summary(WINDOW_MS[job.model]))
        runs[job.model] = run_id
    return db, cid, runs


def test_short_window_cells_say_n_a_with_window_and_count() -> None:
    db, cid, _ = _campaign()
    results = {r.model: r for r in config_results(db, cid)}
    short, long = results["fcn-r"], results["alexnet-r"]
    why = "n/a: window 0.04 s, 1 reading (set min_time_s)"
    for name in ("power", "energy", "gpu-memory", "host-memory", "cpu", "host-cpu"):
        v = value_of(short, name)
        assert (v.value, v.reason, v.simulated_value) == (None, why, None), name
        assert dict(v.extra)["readings"] == 1
    # the long run's figures: GPU ones simulated (FAKE GPUs), host ones plain numbers
    power = value_of(long, "power")
    assert power.reason == "simulated" and power.simulated_value == pytest.approx(100.0)
    assert dict(power.extra) == {"readings": 21, "window_s": 2.0}
    cpu = value_of(long, "cpu")
    assert cpu.value == pytest.approx(100.0) and dict(cpu.extra)["readings"] == 5


def test_exports_carry_the_readings() -> None:
    db, cid, _ = _campaign()
    csv = render(export.build_table(db, cid, "power"), "csv").splitlines()
    header = csv[csv.index(next(line for line in csv if line.startswith("model,")))]
    assert header.endswith("gpu:1,gpu:1 status,gpu:1 readings")
    assert any(line.endswith('"n/a: window 0.04 s, 1 reading (set min_time_s)",1')
               for line in csv)
    doc = json.loads(render(export.build_table(db, cid, "power"), "json"))
    cells = {row["model"]: row["cells"]["gpu:1"] for row in doc["rows"]}
    assert cells["fcn-r"]["readings"] == 1 and cells["fcn-r"]["value"] is None
    assert cells["alexnet-r"]["readings"] == 21
    summary = json.loads(render(export.results_table(db, cid, "summary"), "json"))
    rows = {row["model"]: row for row in summary["rows"]}
    assert rows["fcn-r"]["reasons"]["cpu"].startswith("n/a: window 0.04 s, 1 reading")
    assert rows["alexnet-r"]["detail"]["cpu"] == {"readings": 5, "window_s": 2.0}
    md = render(export.results_table(db, cid, "summary"), "md")
    assert "fewer than 10 GPU readings" in md
    assert md.count("| 21 GPU / 5 host |") == 1 and md.count("| 1 GPU / 1 host |") == 1
    pivot = render(export.build_table(db, cid, "cpu"), "md")
    assert "| 100.0 (5 readings) |" in pivot and "fewer than 10 GPU readings" in pivot


def test_the_run_detail_blames_the_window_not_the_gpu() -> None:
    db, _, runs = _campaign()
    short = read_run_detail(db, runs["fcn-r"])
    assert short is not None
    why = "window 0.04 s, 1 reading (set min_time_s)"
    assert short.why_missing("gpu") == why and short.why_missing("telemetry") == why
    rows = {key: value for key, value, _ in telemetry_rows(short)}
    # no number from one reading: the rows are missing, and say why through their group
    assert rows["power mean"] is None and rows["J/sample"] is None and rows["rss peak"] is None
    assert rows["window"] == "0.04 s, 1 GPU / 1 host readings"
    long = read_run_detail(db, runs["alexnet-r"])
    assert long is not None
    rows = {key: value for key, value, _ in telemetry_rows(long)}
    assert rows["power mean"] == "100.0 W" and rows["window"] == "2.0 s, 21 GPU / 5 host readings"
    # a long window whose GPU gave no power is the GPU's doing (NVML: not supported)
    assert long.why_missing("gpu") == "not reported by the GPU (NVML: not supported)"


def test_the_report_energy_figure_leaves_the_short_configuration_out() -> None:
    db, cid, _ = _campaign()
    results = config_results(db, cid)
    fig = energy_figure(results, identity.variation(placed_identities(results)))
    assert {str(row["config"]).split()[0] for row in fig.rows} == {"alexnet-r"}
    assert "left out, too few readings: fcn-r b64 gpu:1 (torch) (window 0.04 s, " \
        "1 reading (set min_time_s))" in fig.caption


def test_a_multi_node_summary_counts_each_gpus_and_nodes_readings() -> None:
    # two nodes' agents, 0.5 s windows of 5 GPU readings; node b's GPU 1 sent one window
    gpu = [NodeGpuRow(node, i, t, 5, 50.0, 60.0, 1 << 30, 200.0, None, True)
           for node in ("a", "b") for i in (0, 1) for t in (10.5, 11.0, 11.5)
           if not (node == "b" and i == 1 and t > 10.5)]
    host = [NodeHostRow(node, t, 1, 40.0, 30.0, 8.0, 0.0)
            for node, times in (("a", (10.5, 11.0)), ("b", (11.0,))) for t in times]
    t = summarize(gpu, host, (10.0, 12.0), samples=64)
    assert (t.gpu_readings, t.host_readings, t.gpu_samples) == (5, 1, 50)


def test_a_database_before_the_counts_is_judged_by_its_windows() -> None:
    # as a dltop before migration 18 left it, opened read-only (nothing migrates it)
    db, cid, _ = _campaign()
    for column in ("gpu_readings", "host_readings"):
        db.execute(f"alter table runs drop column {column}")
    results = {r.model: r for r in config_results(db, cid)}
    assert value_of(results["fcn-r"], "cpu").reason == \
        "n/a: window 0.04 s, readings not counted (set min_time_s)"
    cpu = value_of(results["alexnet-r"], "cpu")
    assert cpu.value == pytest.approx(100.0) and dict(cpu.extra)["readings"] is None


class _Stored(dict):  # a run's stored columns, as the rule reads them
    def get(self, name, default=None):  # type: ignore[override]
        return super().get(name, default)


def test_a_serve_runs_short_window_names_what_lengthens_it() -> None:
    # a serve run sends a fixed number of requests: min_time_s does not apply to it
    runs = [_Stored(window_s=0.47, host_readings=1)]
    assert check_runs(runs, gpu=False)[0] == "n/a: window 0.47 s, 1 reading (set min_time_s)"
    assert check_runs(runs, gpu=False, serve=True)[0] == (
        "n/a: window 0.47 s, 1 reading (raise iterations or lower request_rate)")
    assert check_runs([_Stored(window_s=5.0, host_readings=9)], gpu=False, serve=True)[0] == ""
