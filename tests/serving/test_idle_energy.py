"""Issue 41 item 4: a serve run's idle power before its load, and its energy per output
token and per request, from a real engine running the ``openai`` runner against the
streaming fake (tests/programs/fake_openai.py) on one GPU.

Hardware boundary: no GPU here, so the allocator is told of one and the sampler reads a
simulated one (``FakeGpuBackend``: labelled simulated, so every figure is ``simulated``
with its number kept apart). Everything else is real: the runner process, its idle wait
and its requests, the sampler thread, the database.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs import campaign
from dltop.jobs.allocator import DeviceAllocator
from dltop.jobs.engine import Engine
from dltop.jobs.environment import core_order
from dltop.profiles.loader import parse
from dltop.results.aggregate import read_config_results
from dltop.results.metricdefs import METRICS
from dltop.results.metrics import value_of
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.readings import MIN_GPU_READINGS
from dltop.telemetry.sampler import Sampler

pytestmark = pytest.mark.slow

PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = {url}
devices = ["gpu:1"]
new_tokens = 8
prompt_tokens = 4
iterations = 40
warmup = 1
timeout_s = 60
request_rate = 20
concurrency = 4
[[matrix]]
models = ["multi"]
"""
IDLE_LINE = re.compile(r"idle before the load .*monotonic (\d+) to (\d+) ns")


def _serve_on_a_fake_gpu(tmp_path: Path, url: str, gpu_hz: float,
                         gpus: int = 1) -> tuple[Store, int]:
    """One serve run on ``gpus`` simulated GPUs sampled at ``gpu_hz``, each stored GPU row
    one reading (rows of 10 ms at most); the store and the run id."""
    prof = parse(PROFILE.format(url=json.dumps(url)).replace("gpu:1", f"gpu:{gpus}"),
                 "serve.toml", "serve")
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([prof], gpus, False)
    cid = campaign.store_plan(store, plan, ["test"])
    engine = Engine(store, cid, plan.name, logs_dir=tmp_path / "runs", db_label="t",
                    sampler_factory=lambda cb: Sampler(FakeGpuBackend(gpus), cb, gpu_hz, 5,
                                                       window_s=0.01),
                    allocator=DeviceAllocator(gpus, core_order(), pack=False))
    assert asyncio.run(engine.run()) == "finished"
    return store, int(store.db.execute("select id from runs").fetchone()[0])


def _run(db: Path, run_id: int) -> dict[str, Any]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("select * from runs where id = ?", [run_id]).fetchone())
    conn.close()
    return row


def test_idle_power_before_the_load_and_joules_per_token(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "10", "--itl-ms", "3")
    store, run_id = _serve_on_a_fake_gpu(tmp_path, url, 10.0)
    run = _run(tmp_path / "d.db", run_id)
    assert run["status"] == "ok", run["error_message"]
    assert run["telemetry_simulated"] == 1

    # the idle wait is the runner's, before its first request: its readings from gpu_samples
    log = (tmp_path / "runs" / f"run-{run_id}" / "runner.log").read_text()
    found = IDLE_LINE.search(log)
    assert found, log
    start_s, end_s = int(found[1]) / 1e9, int(found[2]) / 1e9
    assert run["idle_window_s"] == pytest.approx(end_s - start_s)
    assert run["idle_window_s"] >= 2.0
    conn = sqlite3.connect(tmp_path / "d.db")
    powers = [p for (p,) in conn.execute(
        "select power_mean_w from gpu_samples where run_id = ? and n = 1 and "
        "t_start_mono_s between ? and ?", [run_id, start_s, end_s])]
    first_send = conn.execute("select min(t_mono_ns - seconds * 1e9) from iterations "
                              "where run_id = ?", [run_id]).fetchone()[0]
    tokens, ok = conn.execute(
        "select sum(output_tokens), count(*) from serve_requests where run_id = ? and "
        "warmup = 0 and error is null", [run_id]).fetchone()
    conn.close()
    assert first_send / 1e9 >= end_s  # no request was sent during the wait
    assert run["idle_readings"] >= MIN_GPU_READINGS
    # a stored row's time is its window's opening, µs after its reading: at an edge, one
    # reading may fall on the other side (the simulated power moves ~35 W/s)
    assert abs(len(powers) - run["idle_readings"]) <= 1
    exact = len(powers) == run["idle_readings"]
    assert run["idle_power_w"] == pytest.approx(sum(powers) / len(powers),
                                                rel=1e-9 if exact else 0.02)

    # energy per output token and per request: the stored energy over the stored counts
    assert ok == 40 and tokens >= 40
    (res,) = read_config_results(store.db, [1])
    for name, count in (("j-per-token", tokens), ("j-per-request", ok)):
        cell = value_of(res, name)
        assert cell.value is None and cell.reason == "simulated"  # never unmarked
        assert cell.simulated_value == pytest.approx(run["energy_j"] / count)
        extra = dict(cell.extra)
        assert extra["idle_power_w"] == pytest.approx(run["idle_power_w"])
        assert extra["net_j"] == pytest.approx(
            (run["energy_j"] - run["idle_power_w"] * run["window_s"]) / count)
    assert value_of(res, "power").reason == "simulated"

    # the same numbers as real GPUs' would show (and a host with RAPL)
    conn = sqlite3.connect(tmp_path / "d.db")
    with conn:
        conn.execute("update runs set telemetry_simulated = 0, cpu_idle_power_w = 40.0")
    conn.close()
    (res,) = read_config_results(store.db, [1])
    cell = value_of(res, "j-per-token")
    net = (run["energy_j"] - run["idle_power_w"] * run["window_s"]) / tokens
    assert cell.value == pytest.approx(run["energy_j"] / tokens)
    assert cell.text(METRICS["j-per-token"]).endswith(f" (net {net:.4g})")
    power = value_of(res, "power")
    assert power.value == pytest.approx(run["power_mean_w"])
    assert power.suffix == f" (idle {run['idle_power_w']:.0f} W before the load; host CPU 40 W)"


def test_too_few_readings_in_the_idle_wait_say_so(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "10", "--itl-ms", "3")
    store, run_id = _serve_on_a_fake_gpu(tmp_path, url, 2.0)  # ~4 readings in 2 s
    run = _run(tmp_path / "d.db", run_id)
    assert run["status"] == "ok", run["error_message"]
    assert run["idle_window_s"] >= 2.0 and run["idle_readings"] < MIN_GPU_READINGS
    (res,) = read_config_results(store.db, [1])
    cell = value_of(res, "j-per-token")
    extra = dict(cell.extra)
    assert extra["net_j"] is None and extra["idle_power_w"] is None
    # the net figure says why; the window's figure stands on its own readings
    assert cell.value is None and cell.reason.startswith(("n/a: window", "simulated"))
    assert cell.suffix == (f" (net n/a: idle {run['idle_window_s']:.2g} s, "
                           f"{run['idle_readings']} readings (raise --gpu-hz))")


def test_a_server_on_two_gpus_is_one_client_its_energy_both_gpus(
        tmp_path: Path, fake_server) -> None:
    # devices = ["gpu:2"]: a tensor-parallel server's GPUs (docs/serving.md's vllm-tp2),
    # not two workers of a batch: the profile loads (it was refused: "global batch 1 does
    # not divide over 2 workers") and the run samples both GPUs
    url = fake_server("--ttft-ms", "5", "--itl-ms", "2")
    _, run_id = _serve_on_a_fake_gpu(tmp_path, url, 10.0, gpus=2)
    run = _run(tmp_path / "d.db", run_id)
    assert run["status"] == "ok", run["error_message"]
    # a request of new_tokens = 8 output tokens, not one per GPU
    assert (run["gpu_indices"], run["samples_per_iter"]) == ("0,1", 8)
    conn = sqlite3.connect(tmp_path / "d.db")
    sampled = {g for (g,) in conn.execute(
        "select distinct gpu_index from gpu_samples where run_id = ?", [run_id])}
    ok = conn.execute("select count(*) from serve_requests where run_id = ? and "
                      "warmup = 0 and error is null", [run_id]).fetchone()[0]
    conn.close()
    assert sampled == {0, 1} and ok == 40
    assert run["idle_readings"] >= MIN_GPU_READINGS and run["energy_j"] > 0
