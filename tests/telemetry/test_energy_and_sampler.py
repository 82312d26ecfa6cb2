"""Run summaries (exact energy on scripted traces) and the sampler end to end into SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import psutil
import pytest

from dltop.errors import UserError
from dltop.store import Store, memory_db
from dltop.telemetry import fake_gpus_from_env
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.host import HostSampler
from dltop.telemetry.runstats import RunAccumulator
from dltop.telemetry.sampler import Sampler, check_rate
from dltop.telemetry.values import GpuProcess
from dltop.telemetry.windows import Batch

from .traces import LinearTrace


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


@pytest.mark.parametrize("slope", [0.0, 10.0])
def test_energy_from_counter_and_integration_is_exact(slope: float) -> None:
    clock = Clock()
    fake = FakeGpuBackend(1, LinearTrace(p0_w=100.0, slope_w_per_s=slope), clock_ns=clock)
    counter = RunAccumulator(1, os.getpid(), (0,))
    integrated = RunAccumulator(2, os.getpid(), (0,))
    for step in range(11):  # t = 0 .. 5 s every 0.5 s
        clock.ns = int(step * 0.5e9)
        s = fake.sample(0, slow=False)
        counter.add_gpu(s)
        integrated.add_gpu(s.__class__(**{**s.__dict__, "energy_j": None}))
    for acc in (counter, integrated):  # one measured step covering the whole trace
        acc.iteration(int(5e9), 5.0, warmup=False)
    expected = 100.0 * 5 + slope * 25 / 2
    a, b = counter.summary(samples=1000), integrated.summary(samples=1000)
    assert (a.energy_source, b.energy_source) == ("counter", "integrated")
    assert a.energy_j == pytest.approx(expected, abs=1e-9)
    assert b.energy_j == pytest.approx(expected, abs=1e-9)
    assert a.joules_per_sample == pytest.approx(expected / 1000)
    assert a.power_mean_w == pytest.approx(100.0 + slope * 2.5)


def test_contamination_and_own_memory() -> None:
    procs = {0: (GpuProcess(os.getpid() + 100000, 2**30, None),
                 GpuProcess(4242, 2**20, None))}
    fake = FakeGpuBackend(2, processes=lambda i: procs.get(i, ()))
    acc = RunAccumulator(1, os.getpid() + 100000, (0,))
    acc.iteration(0, 0.0, warmup=True)
    acc.add_gpu(fake.sample(0, slow=True))
    acc.add_gpu(fake.sample(1, slow=True))  # not the run's GPU: ignored
    acc.iteration(time.monotonic_ns(), 1.0, warmup=False)
    t = acc.summary(None)
    assert t.contaminated is True and t.gpu_mem_run_peak_bytes == 2**30
    assert t.contamination is not None and t.contamination.startswith("gpu: pid 4242 (")
    assert t.gpu_samples == 1 and t.telemetry_simulated is True
    clean = RunAccumulator(2, 4242, (0,))
    clean.tree_pids = frozenset({4242, os.getpid() + 100000})
    clean.iteration(0, 0.0, warmup=True)
    clean.add_gpu(fake.sample(0, slow=True))
    clean.iteration(time.monotonic_ns(), 1.0, warmup=False)
    assert clean.summary(None).contaminated is False


@pytest.mark.slow  # samples for a second: over 1 s
def test_sampler_end_to_end_into_sqlite(wait_until: Callable[..., None]) -> None:
    db = memory_db()
    batches: list[Batch] = []
    sampler = Sampler(FakeGpuBackend(3), batches.append, gpu_hz=50, host_hz=10,
                      window_s=0.1, flush_s=0.2)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        sampler.start()
        wait_until(lambda: sampler.ticks >= 10, 30, "ticks before the run")
        sampler.begin_run(7, child.pid, (0, 2))
        sampler.iteration(7, time.monotonic_ns(), 0.1, warmup=True)
        begun = sampler.ticks
        # Ticks, not seconds: a loaded machine slows the sampler without breaking it.
        wait_until(lambda: sampler.ticks >= begun + 40, 60, "40 ticks of the run")
        sampler.iteration(7, time.monotonic_ns(), 0.1, warmup=False)
        summary = sampler.end_run(7, samples=100)
        ended = sampler.ticks
        wait_until(lambda: sampler.ticks >= ended + 10, 30, "ticks after the run")
        sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert summary is not None
    assert summary.gpu_samples > 20 and summary.host_samples > 3
    assert summary.energy_source == "counter" and summary.energy_j and summary.energy_j > 0
    assert summary.rss_peak_bytes and summary.rss_peak_bytes > 1_000_000
    assert sampler.missed_ticks < sampler.ticks / 2
    for b in batches:
        Store(db).telemetry.write_batch(b)
    run_rows = list(db.query("select distinct gpu_index from gpu_samples where run_id = 7"))
    assert sorted(r["gpu_index"] for r in run_rows) == [0, 1, 2]  # windows of all GPUs
    assert next(db.query("select count(*) c from gpu_samples where run_id is null"))["c"] > 0
    assert next(db.query("select min(simulated) m from gpu_samples"))["m"] == 1
    host = list(db.query("select * from host_samples where run_id = 7"))
    assert host and any(h["tree_rss_bytes"] for h in host)
    db["campaigns"].insert({"id": 1, "name": "x", "status": "running", "created_at": "t"})
    db["jobs"].insert({"id": 1, "campaign_id": 1, "status": "x", "framework": "torch",
                       "model": "fcn-r", "batch_size": 1, "device": "gpu:2"})
    db["runs"].insert({"id": 7, "job_id": 1, "campaign_id": 1, "attempt": 1, "status": "ok"})
    Store(db).telemetry.write_run_telemetry(7, summary)
    row = db["runs"].get(7)
    assert row["energy_source"] == "counter" and row["telemetry_simulated"] == 1
    # The counter interpolated at both edges, its bound stored beside it.
    assert summary.energy_bound_j is not None and 0 <= summary.energy_bound_j < summary.energy_j
    assert row["energy_bound_j"] == pytest.approx(summary.energy_bound_j)
    # CPU energy: a figure where this host's RAPL is readable, else the reason.
    assert (row["cpu_energy_j"] is None) != (row["cpu_energy_note"] is None)


def test_host_tree_includes_grandchildren() -> None:
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)']); "
            "time.sleep(5)")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        host = HostSampler()
        deadline = time.monotonic() + 5
        tree = host.tree(child.pid)
        while (tree is None or tree.n_processes < 2) and time.monotonic() < deadline:
            time.sleep(0.1)
            tree = host.tree(child.pid)
        assert tree is not None and tree.n_processes == 2 and tree.threads >= 2
        child.kill()
        child.wait()
        assert host.tree(child.pid) is None  # a vanished root is not an error
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.parametrize("rate", [0, -1, 1000, float("nan")])
def test_invalid_rates(rate: float) -> None:
    with pytest.raises(UserError, match="rate"):
        check_rate("--gpu-hz", rate)


def test_fake_gpus_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_FAKE_GPUS", "3")
    assert fake_gpus_from_env() == 3
    monkeypatch.setenv("DLTOP_FAKE_GPUS", "three")
    with pytest.raises(UserError, match="DLTOP_FAKE_GPUS"):
        fake_gpus_from_env()


def test_packed_runs_get_only_their_gpus_and_their_own_host_rows(
        wait_until: Callable[..., None]) -> None:
    batches: list[Batch] = []
    sampler = Sampler(FakeGpuBackend(4), batches.append, gpu_hz=10, host_hz=10)
    a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    b = subprocess.Popen([sys.executable, "-c", "x = bytearray(50_000_000); "
                          "import time; time.sleep(5)"])
    try:
        # b has allocated once its RSS passes the 50 MB it asked for
        wait_until(lambda: psutil.Process(b.pid).memory_info().rss > 50_000_000, 30,
                   "the allocation")
        sampler.begin_run(1, a.pid, (0, 1))
        sampler.begin_run(2, b.pid, (2,))
        for run in (1, 2):
            sampler.iteration(run, time.monotonic_ns(), 0.0, warmup=True)
        for _ in range(5):
            sampler.tick()
        for run in (1, 2):
            sampler.iteration(run, time.monotonic_ns(), 0.0, warmup=False)
        one, two = sampler.end_run(1), sampler.end_run(2)
        sampler.stop()  # closes the open window
    finally:
        for p in (a, b):
            p.kill()
            p.wait()
    assert one is not None and two is not None
    assert one.gpu_samples == 10 and two.gpu_samples == 5  # 5 ticks x their GPUs only
    assert one.rss_peak_bytes and two.rss_peak_bytes
    assert two.rss_peak_bytes > one.rss_peak_bytes + 40_000_000  # each its own tree
    gpu = {(w.gpu_index, w.run_id) for batch in batches for w in batch.gpu}
    assert gpu == {(0, 1), (1, 1), (2, 2), (3, None)}  # GPU 3: nobody's
    host = [w for batch in batches for w in batch.host]
    assert {w.run_id for w in host} == {1, 2}
    assert all(w.tree_rss_bytes for w in host)
