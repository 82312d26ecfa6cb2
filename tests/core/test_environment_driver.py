"""The GPU driver version: from the telemetry backend's static facts into the
environment row, and from there into every export's caption."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from dltop.jobs import campaign
from dltop.jobs.allocator import DeviceAllocator
from dltop.jobs.engine import Engine
from dltop.jobs.environment import core_order, driver_version, environment_row
from dltop.profiles.loader import parse
from dltop.results import export
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.model import GpuStatic
from dltop.telemetry.sampler import Sampler

STEPS = """
import sys, time
from dltop_report import step
for _ in range(int(sys.argv[1])):
    with step(samples=8) as s:
        time.sleep(0.05)
        s.loss = 1.0
"""


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
    # Hardware boundary: no GPU here, so the allocator is told of one and the sampler
    # reads a simulated one; the run is a real process (a `command` job).
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    command = json.dumps([sys.executable, str(script), "{total}"])
    prof = parse(f'[[matrix]]\nframeworks=["command"]\nmodels=["a"]\nbatch_sizes=[8]\n'
                 f'devices=["gpu:1", "cpu:1"]\nwarmup=1\niterations=3\ntimeout_s=60\n'
                 f'command={command}\n', "gpu.toml", "gpu")
    store = Store(connect(tmp_path / "d.db"))
    plan = campaign.preflight([prof], 1, False)
    cid = campaign.store_plan(store, plan, ["test"])
    engine = Engine(store, cid, plan.name, logs_dir=tmp_path / "runs", db_label="t",
                    sampler_factory=lambda cb: Sampler(FakeGpuBackend(1), cb, 10, 5),
                    allocator=DeviceAllocator(1, core_order(), pack=False))
    assert asyncio.run(engine.run()) == "finished"
    got = {r["device"]: r["driver_version"] for r in store.db.query(
        "select j.device, e.driver_version from environment e join runs r on r.id = e.run_id "
        "join jobs j on j.id = r.job_id")}
    assert got == {"gpu:1": "fake (simulated)", "cpu:1": None}
    md = export.render(export.results_table(store.db, cid), "md")
    assert "; driver fake (simulated);" in md
    doc = json.loads(export.render(export.results_table(store.db, cid), "json"))
    assert doc["environment"]["driver"] == ["fake (simulated)"]
