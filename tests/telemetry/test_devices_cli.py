"""``dltop devices`` / ``doctor`` as a user runs them, on this GPU-less machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.telemetry import gpu_count


def dltop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(gpu_count() > 0, reason="checks the no-GPU report")
def test_devices_without_gpu_shows_host_and_reason() -> None:
    res = dltop("devices")
    assert res.returncode == 0, res.stderr
    assert "GPUs: none (" in res.stdout and "Host:" in res.stdout
    doc = json.loads(dltop("devices", "--json").stdout)
    assert doc["gpus"] == [] and doc["gpu_unavailable_reason"]
    assert len(doc["host"]["cpu_pct_per_core"]) >= 1


def test_fake_gpus_are_marked_simulated() -> None:
    res = dltop("devices", "--fake-gpus", "8")
    assert res.returncode == 0
    assert res.stdout.startswith("SIMULATED GPUs")
    assert res.stdout.count("[simulated]") == 8
    doc = json.loads(dltop("devices", "--fake-gpus", "2", "--json").stdout)
    assert doc["simulated"] is True and all(g["simulated"] for g in doc["gpus"])


def test_bad_inputs_exit_2() -> None:
    res = dltop("devices", "--fake-gpus", "two")
    assert res.returncode == 2 and "non-negative integer" in res.stderr
    res = dltop("run", "quick", "--gpu-hz", "0")
    assert res.returncode == 2 and "--gpu-hz" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.tensorflow
@pytest.mark.cntk
@pytest.mark.jax
def test_doctor_reports_each_framework(tmp_path: Path) -> None:
    # one doctor (it starts an interpreter per framework) for all four frameworks; JAX's
    # missing-install advice: tests/runners/test_jax_runner.py
    import jax

    env = {**os.environ, "DLTOP_CONFIG": str(tmp_path / "c.toml")}
    res = subprocess.run([sys.executable, "-m", "dltop", "doctor"], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    assert f"[ok] jax: {jax.__version__}, devices: 1 x cpu via" in res.stdout
    assert "[ok] torch: 2." in res.stdout and "nvml" in res.stdout
    assert "[ok] tensorflow: 2." in res.stdout and "[ok] cntk: 2.7 via" in res.stdout
    # the serve client's version is its HTTP library's, named as such
    assert "[ok] openai: aiohttp 3." in res.stdout


def test_devices_reports_host_cpu_under_a_busy_process() -> None:
    """A real process spinning on a core: the host CPU `dltop devices` reports is not 0."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        doc = json.loads(dltop("devices", "--json").stdout)
    finally:
        busy.kill()
        busy.wait()
    cores = doc["host"]["cpu_pct_per_core"]
    # One core's worth of a spinning loop over the 0.25 s window: far above 0 in total.
    assert sum(cores) >= 20.0, cores
    assert doc["host"]["cpu_user_pct"] and doc["host"]["cpu_user_pct"] > 0


def test_devices_json_is_strict_a_nan_reading_is_null() -> None:
    """A GPU or host reading that is no finite number is null, never a bare NaN that
    jq and JavaScript refuse; nothing is stringified."""
    from dataclasses import replace

    from dltop.cli.info import devices_json
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.report import snapshot_devices

    report = snapshot_devices(open_gpu_backend(1))
    (static, sample), = report.gpus
    report = replace(report, gpus=((replace(static, power_limit_w=float("inf")), sample),),
                     host=replace(report.host, load_1m=float("nan")))

    def refuse(word: str) -> None:
        raise AssertionError(f"{word} in devices --json")

    doc = json.loads(devices_json(report), parse_constant=refuse)
    assert doc["host"]["load_1m"] is None and doc["gpus"][0]["power_limit_w"] is None
    assert doc["gpus"][0]["name"] == static.name and doc["simulated"] is True
