"""Golden files: every results table in every format, byte for byte.

A small campaign with known runs is stored through :class:`dltop.store.Store`;
each (table, format) rendering is compared to ``tests/results/golden/``.
``DLTOP_UPDATE_GOLDEN=1 pytest tests/results/test_golden.py`` rewrites the files
(review the diff before committing them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlite_utils

from dltop.profiles.loader import parse
from dltop.results import export
from dltop.results.render import render
from dltop.results.stats import summarize_run
from dltop.store import Store, memory_db

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DLTOP_UPDATE_GOLDEN") == "1"
CREATED = "<created_at>"
"""The campaign's real creation time is replaced by this, so the files are stable."""

PROFILE = """
name = "gold_en"
[defaults]
repeats = 2
[[matrix]]
frameworks = ["torch", "tensorflow"]
models = ["alexnet-r", "fcn-r"]
batch_sizes = [64]
devices = ["cpu:1", "cpu:2", "gpu:1", "gpu:2"]
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [32]
devices = ["cpu:1"]
"""

# (framework, model, batch, device) -> per repeat: (status, seconds, packed) or None (never ran)
RUNS: dict[tuple[str, str, int, str], list[tuple[str, list[float] | None, bool] | None]] = {
    ("torch", "fcn-r", 64, "cpu:1"): [("ok", [0.2, 0.2, 0.2], False),
                                      ("ok", [0.4, 0.4, 0.4], False)],
    ("torch", "fcn-r", 64, "cpu:2"): [("ok", [0.1, 0.2, 0.1], False), ("oom", None, False)],
    ("torch", "fcn-r", 64, "gpu:1"): [("ok", [0.05, 0.05], True), ("ok", [0.05, 0.05], False)],
    ("torch", "fcn-r", 64, "gpu:2"): [("ok", [0.03, 0.03], False), ("ok", [0.03, 0.03], False)],
    ("torch", "alexnet-r", 64, "cpu:1"): [("timeout", None, False), ("oom", None, False)],
    ("torch", "alexnet-r", 64, "cpu:2"): [("unsupported", None, False),
                                      ("unsupported", None, False)],
    ("torch", "alexnet-r", 64, "gpu:1"): [("ok", [1.5, 1.5], False), ("crashed", None, False)],
    ("torch", "alexnet-r", 64, "gpu:2"): [("crashed", None, False), ("diverged", None, False)],
    ("tensorflow", "fcn-r", 64, "cpu:1"): [("ok", [12.345678, 12.345678], False), None],
    ("tensorflow", "fcn-r", 64, "cpu:2"): [("cancelled", None, False), None],
    ("tensorflow", "fcn-r", 64, "gpu:2"): [("ok", [0.0001234, 0.0001234], False), None],
    ("torch", "fcn-r", 32, "cpu:1"): [("ok", [0.25, 0.25], False), ("ok", [0.25, 0.25], False)],
}
"""Jobs not listed stay queued (no run); batch 32 has a cpu:1 job only (empty cells)."""


SHORT = ("torch", "fcn-r", 64, "gpu:2", 1)
"""The run whose measured window is too short for its telemetry: its GPU and host figures
read ``n/a`` with its window and readings (dltop.telemetry.readings)."""


def _telemetry(key: tuple[str, str, int, str], repeat: int, simulated: bool,
               ) -> dict[str, object]:
    """Summary columns of an ok run: host readings always, GPU readings on GPU devices."""
    device = key[3]
    short = (*key, repeat) == SHORT
    fields: dict[str, object] = {"window_s": 0.04 if short else 12.0,
                                 "host_readings": 0 if short else 24,
                                 "rss_peak_bytes": (1000 + 24 * repeat) * 2**20,
                                 "host_cpu_mean_pct": 40.0 + repeat,
                                 "host_cpu_user_pct": 30.0 + repeat, "host_cpu_system_pct": 8.0,
                                 "host_cpu_iowait_pct": 0.5 * repeat,
                                 "flops_per_sample": 3e9}
    if device.startswith("gpu"):
        fields.update({"gpu_readings": 0 if short else 120,
                       "device_name": "NVIDIA H100 80GB HBM3", "power_mean_w": 300.0 + repeat,
                       "joules_per_sample": 0.5, "gpu_mem_run_peak_bytes": 2048 * 2**20,
                       "gpu_mem_peak_bytes": 4096 * 2**20,
                       "telemetry_simulated": int(simulated)})
    return fields


def _environment(framework: str, device: str, simulated: bool) -> dict[str, object]:
    """What a runner's hello and the host facts store for a run (fixed, fictitious)."""
    kind, _, count = device.partition(":")
    threads = int(count) if kind == "cpu" else 1
    env: dict[str, object] = {
        "host": "host-1", "os": "Linux-6.1.0-x86_64", "cpu_model": "Test CPU 9000",
        "physical_cores": 16, "logical_cores": 32, "python_version": "3.11.4",
        "framework": framework,
        "framework_version": {"torch": "2.3.1", "tensorflow": "2.15.0"}[framework],
        "blas": "mkl" if framework == "torch" else "eigen", "threads": threads,
        "thread_env": f'{{"OMP_NUM_THREADS": "{threads}"}}'}
    if kind == "gpu":
        env.update({"cuda_version": "12.1", "cudnn_version": "8902",
                    "device_name": "NVIDIA H100 80GB HBM3",
                    "driver_version": "fake (simulated)" if simulated else "550.54.15"})
    return env


def _campaign(simulated: bool) -> tuple[sqlite_utils.Database, int]:
    db = memory_db()
    store = Store(db)
    jobs = parse(PROFILE, "gold.toml", "gold").jobs
    cid = store.create_campaign("gold_en & 50%", ["gold.toml"], ["dltop"], "host-1", 1, None,
                                pack=True)  # its concurrent runs are packed ones
    ids = store.add_jobs(cid, jobs)
    by_key = {(j.framework, j.model, j.batch_size, j.device.label, j.repeat): i
              for j, i in zip(jobs, ids, strict=True)}
    for (framework, model, batch, device), repeats in RUNS.items():
        for repeat, outcome in enumerate(repeats):
            if outcome is None:
                continue
            status, seconds, packed = outcome
            job_id = by_key[(framework, model, batch, device, repeat)]
            run_id = store.start_run(job_id, cid, 1, "", 64)
            if seconds:
                store.add_iterations(run_id, [
                    {"idx": i, "seconds": s, "samples": 64, "warmup": 0, "loss": None}
                    for i, s in enumerate(seconds)])
            fields = summarize_run(seconds, 64).to_columns() if seconds else {}
            fields["concurrent_runs"] = int(packed)
            if seconds:
                fields.update(_telemetry((framework, model, batch, device), repeat,
                                         simulated))
                db["host_samples"].insert({"run_id": run_id, "n": 4, "cpu_mean_pct": 50.0,
                                           "tree_cpu_pct": 90.0 + 10 * repeat})
            store.finish_run(run_id, job_id, status, fields)
            if seconds:
                store.record_environment(run_id, _environment(framework, device, simulated))
    # a fixed version, so that a release does not rewrite every golden file
    db["campaigns"].update(cid, {"dltop_version": "0.0.0-golden"})
    if simulated:
        db["gpu_samples"].insert({"run_id": 1, "gpu_index": 0, "n": 1, "simulated": 1})
    return db, cid


def _render(table: str, fmt: str, simulated: bool) -> str:
    db, cid = _campaign(simulated)
    created = str(db["campaigns"].get(cid)["created_at"])
    if table in ("scaling", "summary"):
        text = render(export.results_table(db, cid, table), fmt)
    else:
        text = render(export.build_table(db, cid, table), fmt)
    return text.replace(created, CREATED)


CASES = [(table, fmt, False) for table in ("time", "throughput", "scaling", "summary")
         for fmt in ("md", "csv", "json", "latex")] + [("time", "md", True),
                                                        ("summary", "md", True),
                                                        ("power", "csv", False)]
SUFFIX = {"md": "md", "csv": "csv", "json": "json", "latex": "tex"}


@pytest.mark.parametrize(("table", "fmt", "simulated"), CASES)
def test_golden(table: str, fmt: str, simulated: bool) -> None:
    name = f"{table}{'-simulated' if simulated else ''}.{SUFFIX[fmt]}"
    text = _render(table, fmt, simulated)
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{name} missing: run with DLTOP_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs (DLTOP_UPDATE_GOLDEN=1 rewrites it)"
