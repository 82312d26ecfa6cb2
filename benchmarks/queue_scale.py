"""The engine's database work per job with a short and a long queue (goal: ≤ 5 ms at 10 000).

Two campaign databases (files, WAL, as ``dltop run`` opens them) hold 200 and
10 000 queued jobs. For each job this drives the store calls the engine makes
around one run, in its order: the next startable job
(``Queue.next_startable`` with the allocator's room), its spec, the lease wait
ending, progress, the attempt number, ``start_run``, the three run updates
(cooldown, lease, spawn), one control poll (cancel request and control word,
read every 0.5 s), ``finish_run``, the telemetry summary and the environment.
The two databases alternate job by job, so a busy moment on a shared machine
lands on both. The queue shrinks as jobs run, as in a campaign.

Also printed: the former per-job scan (every queued row read and its device
parsed, ``Queue.queued_devices``), and the poll a packing engine makes every
0.5 s when nothing fits (the worst case of the query: it walks the whole queue).

    .venv/bin/python benchmarks/queue_scale.py [--jobs 300] [--sizes 200,10000]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dltop.catalog import RunStatus
from dltop.jobs.allocator import DeviceAllocator
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.telemetry.values import RunTelemetry

PROFILE = """
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [64]
devices = ["cpu:1"]
"""


def _store(path: Path, n: int, device: str = "cpu:1") -> tuple[Store, int]:
    store = Store(connect(path))
    job = parse(PROFILE.replace("cpu:1", device), "p.toml", "p").jobs[0]
    cid = store.create_campaign("scale", ["p.toml"], ["dltop"], "host", 1, None)
    store.add_jobs(cid, [dataclasses.replace(job, repeat=k) for k in range(n)])
    return store, cid


def one_job(store: Store, cid: int, alloc: DeviceAllocator) -> None:
    """The store calls the engine makes for one job, from choosing it to storing its end."""
    queue = store.queue
    room = alloc.room()
    assert room is not None
    found = queue.next_startable(cid, room.gpus, room.cpus, ())
    assert found is not None
    job_id = found[0]
    spec = queue.queued_spec(job_id)
    assert spec is not None
    queue.set_waiting(cid, None)
    queue.progress(cid)
    run_id = store.start_run(job_id, cid, queue.next_attempt(job_id), "", spec.samples_per_iter)
    store.update_run(run_id, {"cooldown_waited_s": 0.0, "start_temp_c": None,
                              "start_power_w": None, "gpu_indices": None, "cpu_affinity": "0"})
    store.update_run(run_id, {"device_lease": "held"})
    store.update_run(run_id, {"pid": 1234, "pgid": 1234, "log_path": "runner.log",
                              "proc_start_time": 1.0})
    queue.take_cancel_run(cid)
    queue.control(cid)
    store.finish_run(run_id, job_id, RunStatus.OK, {
        "median_s": 0.1, "mean_s": 0.1, "p10_s": 0.09, "p90_s": 0.11, "cv": 0.01,
        "samples_per_s": 640.0, "noisy": 0, "n_iterations": 20, "concurrent_runs": 0})
    store.telemetry.write_run_telemetry(run_id, RunTelemetry(host_cpu_mean_pct=50.0))
    store.record_environment(run_id, {"host": "host", "framework": "torch",
                                      "python_executable": sys.executable})


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:8.2f} {statistics.fmean(samples) * 1e3:8.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs run per queue size")
    ap.add_argument("--sizes", default="200,10000", help="queued jobs at the start")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        stores = {n: _store(Path(tmp) / f"q{n}.db", n) for n in sizes}
        packing = {n: _store(Path(tmp) / f"p{n}.db", n, "gpu:2") for n in sizes}
        print(f"setup: {', '.join(map(str, sizes))} queued jobs in "
              f"{time.perf_counter() - t0:.1f} s")
        per_job: dict[int, list[float]] = {n: [] for n in sizes}
        scan: dict[int, list[float]] = {n: [] for n in sizes}
        poll: dict[int, list[float]] = {n: [] for n in sizes}
        busy = DeviceAllocator(2, (0, 1), pack=True)
        busy.try_allocate(parse(PROFILE.replace("cpu:1", "gpu:1"), "p.toml", "p")
                          .jobs[0].device)  # one GPU left: no gpu:2 job fits
        room = busy.room()
        assert room is not None
        for _ in range(min(args.jobs, min(sizes) - 1)):
            for n in sizes:
                store, cid = stores[n]
                t = time.perf_counter()
                one_job(store, cid, DeviceAllocator(0, (0, 1), pack=False))
                per_job[n].append(time.perf_counter() - t)
                t = time.perf_counter()
                store.queue.queued_devices(cid)
                scan[n].append(time.perf_counter() - t)
                pstore, pcid = packing[n]
                t = time.perf_counter()
                assert pstore.queue.next_startable(pcid, room.gpus, room.cpus) is None
                poll[n].append(time.perf_counter() - t)
        print(f"{len(per_job[sizes[0]])} jobs per size, sizes alternating job by job; "
              "ms: median, mean")
        print(f"{'queued jobs':>12} {'per job (engine DB work)':>26} {'former scan':>18} "
              f"{'packing poll, none fits':>24}")
        for n in sizes:
            print(f"{n:>12} {_ms(per_job[n]):>26} {_ms(scan[n]):>18} {_ms(poll[n]):>24}")
        lo, hi = sizes[0], sizes[-1]
        ratio = statistics.median(per_job[hi]) / statistics.median(per_job[lo])
        worst = statistics.median(per_job[hi]) * 1e3
        print(f"per job at {hi} / at {lo} (medians): {ratio:.2f}")
        print(f"goal (<= 5 ms per job at {hi}): {'met' if worst <= 5 else 'NOT met'} "
              f"({worst:.2f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
