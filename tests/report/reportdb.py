"""Campaigns for the report tests and tests/browser, stored as the engine stores them.

:func:`build_report_db` stores a CPU campaign of two frameworks × two batches × 1/2 threads × 2
repeats (one configuration out of memory), and a GPU campaign on simulated GPUs with
power, energy and memory, each run with timed iterations, a loss, and telemetry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlite_utils

from dltop.catalog import CampaignStatus, RunStatus
from dltop.profiles.loader import parse
from dltop.results.stats import summarize_run
from dltop.store import Store, connect
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

CPU_PROFILE = """name = "cpu-demo"
[defaults]
repeats = 2
warmup = 2
iterations = 8
[[matrix]]
frameworks = ["torch", "tensorflow"]
models = ["fcn-r"]
batch_sizes = [8, 16]
devices = ["cpu:1", "cpu:2"]
"""
GPU_PROFILE = """name = "gpu-demo"
[defaults]
warmup = 2
iterations = 8
[[matrix]]
frameworks = ["torch", "tensorflow"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["gpu:1", "gpu:2"]
"""
OOM_MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB <b>bold</b>"


def _seconds(framework: str, batch: int, device: str, repeat: int) -> float:
    n = int(device.partition(":")[2])
    base = (0.02 if framework == "torch" else 0.03) * batch / 8
    return base / (n ** 0.8) * (1 + 0.05 * repeat)


MODES_BLOCK = """[[matrix]]
frameworks = {frameworks}
models = ["{model}"]
batch_sizes = [8]
mode = "{mode}"
precision = "{precision}"
devices = {devices}
"""


def modes_profile(name: str, frameworks: str, modes: tuple[str, ...], *,
                  devices: str = '["cpu:1", "cpu:2"]',
                  precisions: tuple[str, ...] = ("fp32", "bf16")) -> str:
    """A profile of fcn-r at batch 8 over ``devices`` per mode and precision (``mode`` and
    ``precision`` take one value per matrix block): the report's encodings campaigns."""
    head = f'name = "{name}"\n[defaults]\nrepeats = 2\nwarmup = 2\niterations = 8\n'
    return head + "".join(MODES_BLOCK.format(frameworks=frameworks, model="fcn-r", mode=m,
                                             precision=p, devices=devices)
                          for m in modes for p in precisions)


SPEED = {"bf16": 0.6, "inference": 0.35}
"""Step time factors of a precision and a mode (the campaigns above use neither); bf16
also scales worse with devices."""


def add_campaign(db: sqlite_utils.Database, profile: str, name: str, *, gpu: bool,
                 oom: tuple[str, int, str] | None = None, finish: bool = True,
                 host: str = "h") -> int:
    """Store a campaign with a run per job (iterations at 1000 + 10·run s, telemetry)."""
    store = Store(db)
    jobs = parse(profile, f"{name}.toml", name).jobs
    cid = store.create_campaign(name, [f"{name}.toml"], ["dltop"], host, 1, None)
    for spec, job_id in zip(jobs, store.add_jobs(cid, jobs), strict=True):
        device = spec.device.label
        run_id = store.start_run(job_id, cid, 1, "", spec.batch_size)
        if oom == (spec.framework, spec.batch_size, device):
            store.finish_run(run_id, job_id, RunStatus.OOM, {"error_message": OOM_MESSAGE,
                                                             "error_kind": "oom"})
            continue
        sec = _seconds(spec.framework, spec.batch_size, device, spec.repeat) \
            * SPEED.get(spec.precision, 1.0) * SPEED.get(spec.mode, 1.0)
        if spec.precision == "bf16":  # scales worse: its lines part from fp32's
            sec *= spec.device.count ** 0.25
        t0 = 1000.0 + 10 * run_id
        rows, t = [], t0 + 1.0  # a second of start-up before the first step
        for i in range(spec.warmup + spec.iterations):
            s = sec * (3 if i == 0 else 1)
            t += s
            rows.append({"idx": i, "seconds": s, "samples": spec.batch_size,
                         "warmup": int(i < spec.warmup), "loss": 2.3 - 0.1 * i,
                         "t_mono_ns": int(t * 1e9), "t_wall_s": None})
        store.add_iterations(run_id, rows)
        measured = [r["seconds"] for r in rows if not r["warmup"]]
        fields: dict[str, Any] = summarize_run(measured, spec.batch_size).to_columns()
        n_gpu = spec.device.count if gpu else 0
        if gpu:
            fields.update(power_mean_w=150.0 * n_gpu, joules_per_sample=0.5 / n_gpu,
                          gpu_mem_run_peak_bytes=(1 << 30) * spec.batch_size // 8,
                          telemetry_simulated=1, device_name="Fake GPU")
        if spec.framework == "tensorflow" and device.endswith(":2") and spec.repeat == 0:
            fields["noisy"] = 1
        store.finish_run(run_id, job_id, RunStatus.OK, fields)
        store.telemetry.write_batch(Batch(
            tuple(GpuWindow(run_id, t0 + 0.5 * k, g, 5, 80.0, 70.0, 90.0, 1 << 30, 150.0,
                            140.0, 160.0, 10.0, 60.0, 1500.0, True)
                  for k in range(6) for g in range(n_gpu)),
            tuple(HostWindow(run_id, t0 + 0.5 * k, 5, 50.0, 90.0, 1 << 32, 0, 95.0, 1 << 28)
                  for k in range(6))))
    if finish:
        store.set_campaign_status(cid, CampaignStatus.FINISHED)
    return cid


def build_report_db(path: Path) -> Path:
    """A database file with the CPU campaign (1) and the simulated-GPU campaign (2)."""
    db = connect(path)
    add_campaign(db, CPU_PROFILE, "cpu-demo", gpu=False, oom=("tensorflow", 16, "cpu:2"))
    add_campaign(db, GPU_PROFILE, "gpu-demo", gpu=True)
    db.close()
    return path
