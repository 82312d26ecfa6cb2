"""Every metric of ``dltop export --metric``: exact values from stored runs and iterations."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

import pytest
import sqlite_utils

from dltop.results import export
from dltop.results.aggregate import ConfigResult, config_results
from dltop.results.metricdefs import CONVERGENCE, METRICS
from dltop.results.metrics import value_of
from dltop.results.peaks import PEAKS, gpu_peak, peak_tflops
from dltop.results.render import render
from dltop.store import memory_db

MIB = 2**20
# gpu:1, run 1: a 5 s warm-up iteration (excluded), then 0.1, 0.2, 0.3 s; the last
# iteration a partial batch of 4 samples. Run 2: 0.3, 0.3, 0.9 s of 8 samples each.
RUN1 = [(5.0, 8, 1), (0.1, 8, 0), (0.2, 8, 0), (0.3, 4, 0)]
RUN2 = [(0.3, 8, 0), (0.3, 8, 0), (0.9, 8, 0)]
TELEMETRY = [
    {"device_name": "NVIDIA A100-SXM4-80GB", "flops_per_sample": 1e11, "power_mean_w": 200.0,
     "joules_per_sample": 2.0, "gpu_mem_run_peak_bytes": 1024 * MIB,
     "gpu_mem_peak_bytes": 2048 * MIB, "rss_peak_bytes": 512 * MIB, "host_cpu_mean_pct": 30.0},
    {"device_name": "NVIDIA A100-SXM4-80GB", "flops_per_sample": 1e11, "power_mean_w": 300.0,
     "joules_per_sample": 4.0, "gpu_mem_run_peak_bytes": 1536 * MIB,
     "gpu_mem_peak_bytes": 3000 * MIB, "rss_peak_bytes": 600 * MIB, "host_cpu_mean_pct": 50.0},
]
# host windows (n, tree_cpu_pct): run 1 means 75 %, run 2 (120 + 3 × 80) / 4 = 90 %
TREES = [[(2, 100.0), (2, 50.0)], [(1, 120.0), (3, 80.0)]]


def add_run(campaigns: Any, db: sqlite_utils.Database, job_id: int, cid: int,
            iters: list[tuple[float, int, int]], fields: dict[str, Any],
            trees: Sequence[tuple[int, float]] = ()) -> int:
    run_id = int(campaigns.add_run(db, cid, job_id, iters, fields=fields))
    for n, pct in trees:
        db["host_samples"].insert({"run_id": run_id, "n": n, "cpu_mean_pct": 10.0,
                                   "tree_cpu_pct": pct})
    return run_id


def campaign(campaigns: Any, gpu_fields: list[dict[str, Any]] = TELEMETRY,
             ) -> tuple[sqlite_utils.Database, dict[str, ConfigResult]]:
    db = memory_db()
    profile = campaigns.profile("metrics", ["cpu:1", "gpu:1", "gpu:2"], repeats=2)
    cid, jobs = campaigns.create(db, profile, "metrics")
    ids = {(j.device.label, j.repeat): i for j, i in jobs}
    add_run(campaigns, db, ids[("gpu:1", 0)], cid, RUN1, gpu_fields[0], TREES[0])
    add_run(campaigns, db, ids[("gpu:1", 1)], cid, RUN2, gpu_fields[1], TREES[1])
    add_run(campaigns, db, ids[("cpu:1", 0)], cid, [(0.5, 8, 0), (0.5, 8, 0)],
            {"rss_peak_bytes": 100 * MIB})
    return db, {r.device: r for r in config_results(db, cid)}


def test_every_metric_exactly(campaigns: Any) -> None:
    _, res = campaign(campaigns)
    gpu = res["gpu:1"]
    thr = statistics.median([20 / 0.6, 24 / 1.5])  # total samples / total measured seconds
    expected = {
        "time": statistics.median([0.2, 0.3]),
        "mean-time": (0.2 + 0.5) / 2,
        "throughput": thr,
        "power": 250.0,
        "energy": 3.0,
        "gpu-memory": 1536.0,
        "host-memory": 600.0,
        "cpu": (75.0 + 90.0) / 2,
        "tflops": 1e11 * thr / 1e12,
        "mfu": 100 * (1e11 * thr / 1e12) / 19.5,
    }
    assert set(expected) == set(METRICS) - set(CONVERGENCE)
    for name, value in expected.items():
        assert value_of(gpu, name).value == pytest.approx(value), name
    # timed training runs: no evaluations, no latency (tests/results/test_convergence_*)
    assert {value_of(gpu, name).reason for name in CONVERGENCE} == {
        "n/a: no evaluations", "n/a: training run"}
    assert value_of(gpu, "gpu-memory-device").value == pytest.approx(3000.0)
    assert value_of(gpu, "host-cpu").value == pytest.approx(40.0)


def test_cells_without_data_say_why(campaigns: Any) -> None:
    _, res = campaign(campaigns)
    cpu = res["cpu:1"]
    for name in ("power", "gpu-memory"):
        assert value_of(cpu, name).reason == "n/a: no GPU"
    assert value_of(cpu, "energy").reason == "n/a: not sampled"  # no RAPL figure stored
    assert value_of(cpu, "tflops").reason == "n/a: no FLOPs count"
    assert value_of(cpu, "cpu").reason == "n/a: not sampled"
    assert value_of(cpu, "host-memory").value == pytest.approx(100.0)
    assert value_of(res["gpu:2"], "time").reason == "-"  # queued: never ran
    with pytest.raises(ValueError, match="unknown metric 'watts'"):
        value_of(cpu, "watts")


def test_mfu_needs_a_known_gpu_and_cpu_has_no_peak(campaigns: Any) -> None:
    fields = [{**f, "device_name": "NVIDIA Quadro K2000"} for f in TELEMETRY]
    _, res = campaign(campaigns, fields)
    assert value_of(res["gpu:1"], "mfu").reason == "n/a: unknown peak"
    cpu_fields = [{**f, "flops_per_sample": 1e9} for f in TELEMETRY]
    db, _ = campaign(campaigns, cpu_fields)
    db["runs"].update(3, {"flops_per_sample": 1e9})
    cpu = {r.device: r for r in config_results(db, 1)}["cpu:1"]
    assert value_of(cpu, "tflops").value == pytest.approx(1e9 * 16 / 1e12)
    assert value_of(cpu, "mfu").reason == "n/a: CPU peak unknown"


def test_simulated_gpu_readings_never_appear_as_numbers(campaigns: Any) -> None:
    fields = [{**f, "telemetry_simulated": 1} for f in TELEMETRY]
    db, res = campaign(campaigns, fields)
    for name in ("power", "energy", "gpu-memory"):
        v = value_of(res["gpu:1"], name)
        assert (v.value, v.reason) == (None, "simulated") and v.simulated_value is not None
    text = render(export.build_table(db, 1, "power"), "md")
    assert "250.0" not in text and "simulated" in text
    doc = render(export.build_table(db, 1, "power"), "json")
    assert '"simulated_value": 250.0' in doc


def test_gpu_memory_falls_back_to_the_device_peak_marked(campaigns: Any) -> None:
    fields = [{**f, "gpu_mem_run_peak_bytes": None} for f in TELEMETRY]
    db, res = campaign(campaigns, fields)
    v = value_of(res["gpu:1"], "gpu-memory")
    assert v.value == pytest.approx(3000.0) and v.source == "device"
    # Markdown groups digits from 1 000 on (docs/exports.md)
    assert "3 000 (device)" in render(export.build_table(db, 1, "gpu-memory"), "md")


def test_every_metric_has_its_unit_in_the_pivot_title(campaigns: Any) -> None:
    db, _ = campaign(campaigns)
    units = {"time": "seconds", "mean-time": "seconds", "throughput": "samples per second",
             "power": "in W", "energy": "J per sample", "gpu-memory": "MiB",
             "host-memory": "MiB", "cpu": "%", "tflops": "TFLOP/s", "mfu": "%"}
    for name, unit in units.items():
        title = export.build_table(db, 1, name).title
        assert unit in title, (name, title)


@pytest.mark.parametrize(("name", "entry"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe"), ("Tesla V100-SXM2-32GB", "V100 SXM2"),
])
def test_peak_table_matches_device_names(name: str, entry: str) -> None:
    peak = gpu_peak(name)
    assert peak is not None and peak.name == entry


def test_peak_values_and_unknowns() -> None:
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4)
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "tf32") == pytest.approx(156.0)
    assert peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None
    assert peak_tflops("Intel(R) Xeon(R) CPU", "fp32") is None
    assert peak_tflops(None, "fp32") is None


def test_docs_show_the_peak_table_the_code_uses() -> None:
    from pathlib import Path

    precisions = ("fp32", "tf32", "bf16", "fp16", "fp8")
    lines = ["| GPU | " + " | ".join(precisions) + " |",
             "|---|" + "---:|" * len(precisions)]
    for p in PEAKS:
        cells = [f"{p.tflops[k]:g}" if k in p.tflops else "n/a" for k in precisions]
        lines.append(f"| {p.name} | " + " | ".join(cells) + " |")
    docs = Path(__file__).parents[2] / "docs" / "metrics.md"
    assert "\n".join(lines) + "\n" in docs.read_text()


def test_host_cpu_split_in_the_summary_and_the_cpu_pivot(campaigns: Any) -> None:
    split = [{"host_cpu_user_pct": 30.0, "host_cpu_system_pct": 5.0, "host_cpu_iowait_pct": 1.0},
             {"host_cpu_user_pct": 50.0, "host_cpu_system_pct": 7.0}]  # no iowait: off Linux
    db, res = campaign(campaigns, [{**t, **s} for t, s in zip(TELEMETRY, split, strict=True)])
    gpu = res["gpu:1"]
    assert [value_of(gpu, n).value for n in ("host-user", "host-system", "host-iowait")] == [
        pytest.approx(40.0), pytest.approx(6.0), pytest.approx(1.0)]
    assert value_of(res["cpu:1"], "host-user").reason == "n/a: not sampled"
    summary = json.loads(render(export.results_table(db, 1, "summary"), "json"))
    row = next(r for r in summary["rows"] if r["device"] == "gpu:1")
    assert (row["host-user"], row["host-system"], row["host-iowait"]) == (40.0, 6.0, 1.0)
    md = render(export.results_table(db, 1, metric="cpu"), "md")
    # the tree's mean (75 + 90) / 2, then the host's split over the same runs
    assert "| 82.5 (host us 40.0 sy 6.0 wa 1.0) |" in md
    # cpu:1 sampled nothing: no split either (the reason once, under the table)
    assert "| n/a¹ |" in md and "\n¹ n/a: not sampled\n" in md
    doc = json.loads(render(export.results_table(db, 1, metric="cpu"), "json"))
    (cell,) = [r["cells"]["gpu:1"] for r in doc["rows"] if r["cells"].get("gpu:1")]
    assert (cell["value"], cell["host_cpu_user_pct"], cell["host_cpu_iowait_pct"]) == (
        82.5, 40.0, 1.0)
    # GPU runs stored without a driver version (before it was recorded) say so
    assert "driver n/a (not recorded)" in md


@pytest.mark.parametrize(("cpu_fields", "value", "reason"), [
    ({"cpu_joules_per_sample": 0.25}, 0.25, ""),
    ({"cpu_joules_per_sample": 0.25, "cpu_energy_j": 1.5, "dram_energy_j": 0.5,
      "cpu_energy_bound_j": 0.02}, 0.25, ""),
    ({"cpu_energy_note": "n/a: /sys/class/powercap/intel-rapl:0/energy_uj: permission "
                         "denied (root-only since Linux 5.10; ...)"}, None, "n/a: RAPL root-only"),
    ({"cpu_energy_note": "n/a: no RAPL package zone under /sys/class/powercap"}, None,
     "n/a: no RAPL"),
    ({"cpu_energy_note": "n/a: .../energy_uj: counter went backwards (9 -> 3 µJ, ...)"},
     None, "n/a: RAPL fault"),
])
def test_energy_of_a_cpu_configuration_is_rapl_or_says_why(
        campaigns: Any, cpu_fields: dict[str, Any], value: float | None, reason: str) -> None:
    db = memory_db()
    profile = campaigns.profile("metrics", ["cpu:1"], repeats=1)
    cid, jobs = campaigns.create(db, profile, "metrics")
    add_run(campaigns, db, jobs[0][1], cid, [(0.5, 8, 0)], cpu_fields)
    v = value_of(config_results(db, cid)[0], "energy")
    assert (v.value, v.reason) == (value, reason)


def test_host_memory_takes_the_kernels_peak_when_larger(campaigns: Any) -> None:
    db = memory_db()
    profile = campaigns.profile("metrics", ["cpu:1"], repeats=1)
    cid, jobs = campaigns.create(db, profile, "metrics")
    # A 0.1 s spike the 2 Hz samples missed: the kernel saw 900 MiB, the samples 100.
    add_run(campaigns, db, jobs[0][1], cid, [(0.5, 8, 0)],
            {"rss_peak_bytes": 100 * MIB, "rss_peak_kernel_bytes": 900 * MIB})
    assert value_of(config_results(db, cid)[0], "host-memory").value == pytest.approx(900.0)


def test_energy_states_its_bound_beside_the_figure(campaigns: Any) -> None:
    fields = [{**TELEMETRY[0], "energy_j": 100.0, "energy_bound_j": 1.0},
              {**TELEMETRY[1], "energy_j": 200.0, "energy_bound_j": 4.0}]
    db, res = campaign(campaigns, fields)
    v = value_of(res["gpu:1"], "energy")
    # per run: 2.0 J/sample x 1 % and 4.0 J/sample x 2 %: 0.02 and 0.08, mean 0.05
    assert v.value == pytest.approx(3.0) and v.suffix == " ±0.05"
    assert dict(v.extra)["bound_j_per_sample"] == pytest.approx(0.05)
    assert "3.000 ±0.05" in render(export.build_table(db, 1, "energy"), "md")
    # Without a bound (runs stored before, the integrated fallback) no suffix.
    _, plain = campaign(campaigns)
    assert value_of(plain["gpu:1"], "energy").suffix == ""


def test_gpu_memory_carries_the_frameworks_own_peak_in_its_detail(campaigns: Any) -> None:
    fields = [{**f, "gpu_mem_framework_peak_bytes": n * MIB}
              for f, n in zip(TELEMETRY, (700, 900), strict=True)]
    db, res = campaign(campaigns, fields)
    v = value_of(res["gpu:1"], "gpu-memory")
    assert v.value == pytest.approx(1536.0) and dict(v.extra)["framework_mib"] == 900.0
    doc = json.loads(render(export.build_table(db, 1, "gpu-memory"), "json"))
    cells = [row["cells"]["gpu:1"] for row in doc["rows"] if row["cells"].get("gpu:1")]
    assert cells and cells[0]["framework_mib"] == 900.0
