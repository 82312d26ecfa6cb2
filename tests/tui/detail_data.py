"""Deterministic runs for the run detail screen: a finished GPU run with iterations,
loss, telemetry and environment; a crashed run whose log is gone; a big log.

Telemetry rows are written as the sampler writes them (``Store.telemetry.write_batch``)
with fixed values, marked simulated (FAKE GPU readings, labelled as such on screen).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dltop.store import Store, connect
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

from .conftest import Seeded, seed

T0 = 5000.0
"""Monotonic seconds of the finished run's first step start."""


@dataclass
class DetailSeed:
    seeded: Seeded
    ok_run: int
    crashed_run: int
    running_run: int
    log: Path


def run_of(store: Store, job_id: int) -> int:
    return int(next(store.db.query("select id from runs where job_id = ? order by id desc "
                                   "limit 1", [job_id]))["id"])


def seed_detail(tmp_path: Path) -> DetailSeed:
    """:func:`conftest.seed`, with the first (ok) run made a GPU run with everything."""
    s = seed(tmp_path)
    store = Store(connect(s.db_path))
    ok, crashed = run_of(store, s.job_ids[0]), run_of(store, s.job_ids[1])
    log = tmp_path / "ok-runner.log"
    log.write_text("".join(f"step {i}: loss {2.0 - i / 20:.3f}\n" for i in range(25))
                   + "done\n")
    with store.db.conn:
        store.db.execute("update jobs set device = 'gpu:1' where id = ?", [s.job_ids[0]])
        store.db.execute("delete from iterations where run_id = ?", [ok])
    store.update_run(ok, {
        "log_path": str(log), "gpu_indices": "0", "wall_s": 19.5, "n_iterations": 20,
        "median_s": 0.5, "mean_s": 0.51, "p10_s": 0.48, "p90_s": 0.55, "cv": 0.04,
        "noisy": 0, "samples_per_s": 128.0, "final_loss": 1.05,
        "gpu_util_mean_pct": 91.0, "gpu_util_peak_pct": 99.0, "power_mean_w": 231.5,
        "energy_j": 2315.0, "energy_source": "counter", "joules_per_sample": 0.18,
        "gpu_mem_peak_bytes": 12 * 2**30, "gpu_mem_run_peak_bytes": 11 * 2**30,
        "host_cpu_mean_pct": 12.5, "tree_cpu_mean_pct": 104.0, "rss_peak_bytes": 3 * 2**30,
        "throttle_reasons": "sw_power_cap", "contaminated": 0, "telemetry_simulated": 1,
        "window_s": 10.0, "energy_run_j": 3000.0})
    store.add_iterations(ok, [{"idx": i, "seconds": 0.5 + (0.3 if i < 5 else 0.01 * (i % 3)),
                               "samples": 64, "warmup": int(i < 5), "loss": 2.0 - i / 20,
                               "t_mono_ns": int((T0 + 0.5 * (i + 1)) * 1e9)}
                              for i in range(25)])
    store.telemetry.write_batch(Batch(
        tuple(GpuWindow(ok, T0 + 0.5 * t, 0, 5, 60.0 + (t * 7) % 40, 50.0, 100.0,
                        (8 + t % 4) * 2**30, 200.0 + (t * 13) % 60, 150.0, 260.0, 100.0,
                        60.0, 1500.0, True) for t in range(26)),
        tuple(HostWindow(ok, T0 + 0.5 * t, 5, 10.0 + t % 5, 50.0, 8 * 2**30, 0,
                         95.0 + t % 10, (2 + t % 2) * 2**30) for t in range(26))))
    store.record_environment(ok, {
        "host": "testhost", "os": "Linux 6.1", "cpu_model": "Test CPU 9000",
        "physical_cores": 8, "logical_cores": 16, "python_version": "3.12.1",
        "framework": "torch", "framework_version": "2.5.0", "blas": "mkl", "threads": 8,
        "cuda_version": "12.4", "cudnn_version": "9.1", "device_name": "FAKE GPU",
        "driver_version": "550.54"})
    store.update_run(crashed, {
        "error_kind": "crash", "log_path": str(tmp_path / "gone" / "runner.log"),
        "error_message": "runner exited with status 1 before 'done'",
        "log_tail": "Traceback (most recent call last):\n  File \"train.py\", line 3\n"
                    "RuntimeError: boom [/tmp/x]"})
    return DetailSeed(s, ok, crashed, s.run_id, log)


def write_big_log(path: Path, lines: int) -> None:
    """A log of ``lines`` numbered lines (about 80 bytes each), written in blocks."""
    pad = "x" * 60
    with path.open("w") as fh:
        for start in range(0, lines, 10_000):
            fh.write("".join(f"line {i:08d} {pad}\n"
                             for i in range(start, min(lines, start + 10_000))))
