"""The GPUs' settings at run start: read through NVML (a FAKE pynvml at the hardware
boundary), stored in the run's environment, shown by the run detail and the exports."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs import environment
from dltop.live.rundetail import read_run_detail
from dltop.profiles.loader import parse
from dltop.results import export
from dltop.results.render import render
from dltop.store import Store, connect
from dltop.telemetry import nvml
from dltop.telemetry.values import GpuRunFacts

from .test_nvml import NVMLError_NotSupported, fake_pynvml


def unsupported(*a: Any) -> Any:
    raise NVMLError_NotSupported("Not Supported")


H100_FACTS = dict(  # FAKE NVML answers: an H100 SXM as a data centre sets it up
    nvmlDeviceGetPersistenceMode=lambda h: 1,
    nvmlDeviceGetEccMode=lambda h: [1, 1],
    nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5,
    nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
    nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
    nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
    nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
    nvmlDeviceGetClockInfo=lambda h, c: {1: 1980, 2: 2619}[c],
)


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install a FAKE pynvml (two GPUs) with ``override`` applied; None deletes a call."""
    def go(**override: Any) -> None:
        module = fake_pynvml(instant=True)
        for name, value in {**H100_FACTS, **override}.items():
            if value is None:
                if hasattr(module, name):
                    delattr(module, name)
            else:
                setattr(module, name, value)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        nvml.reset_for_tests()

    yield go
    nvml.reset_for_tests()


def test_every_fact_with_its_unit(fake_nvml: Any) -> None:
    fake_nvml()
    f = nvml.gpu_run_facts(1)
    assert f == GpuRunFacts(
        index=1, sm_clock_mhz=1980, mem_clock_mhz=2619, persistence_mode=True,
        power_limit_w=700.0, ecc_enabled=True, pcie_generation=5, pcie_width_lanes=16,
        pcie_max_generation=5, pcie_max_width_lanes=16, compute_capability="9.0")
    assert nvml.compute_capability(0) == (9, 0)


def test_what_the_gpu_does_not_support_is_none(fake_nvml: Any) -> None:
    # A consumer GPU: no ECC, persistence not settable; an old pynvml lacks the PCIe calls.
    fake_nvml(nvmlDeviceGetEccMode=unsupported, nvmlDeviceGetPersistenceMode=unsupported,
              nvmlDeviceGetCurrPcieLinkGeneration=None, nvmlDeviceGetMaxPcieLinkWidth=None,
              nvmlDeviceGetCudaComputeCapability=lambda h: (7, 5))
    f = nvml.gpu_run_facts(0)
    assert f is not None
    assert (f.ecc_enabled, f.persistence_mode, f.pcie_generation, f.pcie_max_width_lanes) == (
        None, None, None, None)
    assert (f.pcie_width_lanes, f.compute_capability, f.sm_clock_mhz) == (16, "7.5", 1980)
    assert nvml.compute_capability(0) == (7, 5)


def test_persistence_off_and_ecc_off_are_false_not_none(fake_nvml: Any) -> None:
    fake_nvml(nvmlDeviceGetPersistenceMode=lambda h: 0, nvmlDeviceGetEccMode=lambda h: [0, 1])
    f = nvml.gpu_run_facts(0)
    assert f is not None and (f.persistence_mode, f.ecc_enabled) == (False, False)


def test_no_nvml_means_no_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no nvidia-ml-py
    nvml.reset_for_tests()
    try:
        assert nvml.gpu_run_facts(0) is None and nvml.compute_capability(0) is None
        assert environment.gpu_facts((0, 1)) == ()
    finally:
        nvml.reset_for_tests()


PROFILE = """
[[matrix]]
frameworks = ["torch"]
models = ["resnet-50"]
batch_sizes = [64]
devices = ["gpu:1"]
"""


def _stored_gpu_run(tmp_path: Path, facts: tuple[GpuRunFacts, ...],
                    hello: dict[str, Any]) -> tuple[Path, int]:
    path = tmp_path / "t.db"
    store = Store(connect(path))
    prof = parse(PROFILE, "g.toml", "g")
    cid = store.create_campaign("g", ["g.toml"], ["dltop"], "gpuhost", 1, None)
    (job_id,) = store.add_jobs(cid, prof.jobs)
    run_id = store.start_run(job_id, cid, 1, "", 64)
    store.finish_run(run_id, job_id, "ok", {"device_name": "NVIDIA H100 80GB HBM3"})
    row = environment.environment_row(hello, {}, prof.jobs[0], (), facts)
    store.record_environment(run_id, row)
    return path, run_id


def test_stored_with_the_environment_and_shown_in_the_run_detail(
        fake_nvml: Any, tmp_path: Path) -> None:
    fake_nvml()
    facts = environment.gpu_facts((0,))
    assert [f.index for f in facts] == [0]
    # A child cannot forge the facts through its hello; its other extras stay.
    hello = {"framework_version": "2.4", "world_size": 1, "compile_s": 12.5,
             environment.GPU_FACTS_KEY: [{"index": 0, "sm_clock_mhz": 9999}]}
    path, run_id = _stored_gpu_run(tmp_path, facts, hello)
    db = connect(path, create=False)
    extra = json.loads(db.execute("select extra from environment").fetchone()[0])
    assert extra["gpus_at_start"][0]["sm_clock_mhz"] == 1980
    assert (extra["world_size"], extra["compile_s"]) == (1, 12.5)
    detail = read_run_detail(db, run_id)
    assert detail is not None
    env = dict(detail.environment)
    assert env["gpu0 at start"] == (
        "SM 1980 MHz, memory 2619 MHz, persistence on, power limit 700 W, ECC on, "
        "PCIe gen 5 x16 (max gen 5 x16), compute capability 9.0")
    assert json.loads(env["extra"] or "") == {"world_size": 1, "compile_s": 12.5}
    keys = [k for k, _ in detail.environment]
    assert keys.index("gpu0 at start") == keys.index("extra") - 1


def test_shown_in_the_exports_environment(fake_nvml: Any, tmp_path: Path) -> None:
    fake_nvml()
    path, _ = _stored_gpu_run(tmp_path, environment.gpu_facts((0,)), {})
    table = export.build_table(connect(path, create=False), [1], "time")
    caption = table.caption[-1]
    assert ("GPU settings persistence on, power limit 700 W, ECC on, PCIe gen 5 x16 "
            "(max gen 5 x16), compute capability 9.0;") in caption
    assert "GPU clocks at start SM 1980 MHz, memory 2619 MHz;" in caption


def test_a_run_without_facts_keeps_its_environment_as_before(tmp_path: Path) -> None:
    path, run_id = _stored_gpu_run(tmp_path, (), {"world_size": 1})
    db = connect(path, create=False)
    detail = read_run_detail(db, run_id)
    assert detail is not None
    assert not any(k.endswith("at start") for k, _ in detail.environment)
    assert dict(detail.environment)["extra"] == '{"world_size": 1}'
    assert "GPU settings" not in export.build_table(db, [1], "time").caption[-1]


@pytest.mark.slow
def test_the_engine_reads_them_as_a_gpu_run_starts(fake_nvml: Any, tmp_path: Path) -> None:
    # Hardware boundary: the FAKE NVML answers for GPU 0, the allocator is told of one
    # GPU, the sampler reads a simulated one; the run is a real process (a command job).
    from .gpu_campaign import run_gpu_and_cpu_jobs

    fake_nvml(nvmlDeviceGetClockInfo=lambda h, c: {1: 1755, 2: 2619}[c])
    store, cid = run_gpu_and_cpu_jobs(tmp_path)
    got = {r["device"]: json.loads(r["extra"]) for r in store.db.query(
        "select j.device, e.extra from environment e join runs r on r.id = e.run_id "
        "join jobs j on j.id = r.job_id")}
    (facts,) = got["gpu:1"]["gpus_at_start"]
    assert (facts["index"], facts["sm_clock_mhz"], facts["compute_capability"]) == (
        0, 1755, "9.0")
    assert "gpus_at_start" not in got["cpu:1"]
    md = render(export.results_table(store.db, cid), "md")
    assert "GPU clocks at start SM 1755 MHz, memory 2619 MHz;" in md
