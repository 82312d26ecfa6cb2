"""The GPU driver version: from the telemetry backend's static facts into the
environment row, and from there into every export's caption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.telemetry.gpu_campaign import run_gpu_and_cpu_jobs

from dltop.jobs.environment import driver_version, environment_row
from dltop.profiles.loader import parse
from dltop.results import export
from dltop.results.render import render
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import GpuStatic


def real(index: int, driver: str | None) -> GpuStatic:
    return GpuStatic(index, "NVIDIA H100 80GB HBM3", None, None, None, driver, "12.4", False)


def test_driver_version_of_real_simulated_and_no_gpus() -> None:
    assert driver_version([real(0, "550.54.15"), real(1, "550.54.15")]) == "550.54.15"
    assert driver_version([FakeGpuBackend(1).static(0)]) == "fake (simulated)"
    assert driver_version([real(0, None)]) is None  # NVML could not say
    assert driver_version([]) is None
    profile = parse('[[matrix]]\nframeworks=["torch"]\nmodels=["fcn-r"]\nbatch_sizes=[8]\n'
                    'devices=["gpu:1"]\n', "p.toml", "p")
    row = environment_row({"python_version": "3.11"}, {}, profile.jobs[0], [real(0, "550.1")])
    assert row["driver_version"] == "550.1"
    assert environment_row({}, {}, profile.jobs[0])["driver_version"] is None


@pytest.mark.slow
def test_engine_records_the_simulated_driver_and_the_caption_labels_it(tmp_path: Path,
                                                                      ) -> None:
    store, cid = run_gpu_and_cpu_jobs(tmp_path)  # a simulated GPU: its driver is "fake"
    got = {r["device"]: r["driver_version"] for r in store.db.query(
        "select j.device, e.driver_version from environment e join runs r on r.id = e.run_id "
        "join jobs j on j.id = r.job_id")}
    assert got == {"gpu:1": "fake (simulated)", "cpu:1": None}
    md = render(export.results_table(store.db, cid), "md")
    assert "; driver fake (simulated);" in md
    doc = json.loads(render(export.results_table(store.db, cid), "json"))
    assert doc["environment"]["driver"] == ["fake (simulated)"]
