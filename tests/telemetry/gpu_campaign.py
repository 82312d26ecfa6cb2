"""A real engine running a ``command`` job on one GPU and one on a CPU core, for the
tests of what a run records about its GPU (the driver version, the settings at start).

Hardware boundary: no GPU here, so the allocator is told of one and the sampler reads a
simulated one (``FakeGpuBackend``); each run is a real process stepping through
``dltop_report``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from dltop.jobs import campaign
from dltop.jobs.allocator import DeviceAllocator
from dltop.jobs.engine import Engine
from dltop.jobs.environment import core_order
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler

STEPS = """
import sys, time
from dltop_report import step
for _ in range(int(sys.argv[1])):
    with step(samples=8) as s:
        time.sleep(0.05)
        s.loss = 1.0
"""


def run_gpu_and_cpu_jobs(tmp_path: Path) -> tuple[Store, int]:
    """Run a campaign of two jobs, ``gpu:1`` and ``cpu:1`` (1 warm-up and 3 measured
    steps each), to the end in ``tmp_path``; the store and the campaign id."""
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
    return store, cid
