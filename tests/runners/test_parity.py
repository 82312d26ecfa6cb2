"""Parity: every framework x every model runs through dltop itself and reports the same size.

One campaign, 3 frameworks x 7 models at batch 2, one measured iteration each,
through the real engine, supervisor and runners. Every run must end ``ok``,
and the parameter count and FLOPs each runner reports must equal docs/models.md's
count and each other.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .test_cntk_runner import COUNTS

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow, pytest.mark.cntk]

PROFILE = """
name = "parity"
[[matrix]]
frameworks = ["torch", "tensorflow", "cntk"]
models = ["fcn-s", "fcn-r", "alexnet-s", "alexnet-r", "resnet-50", "resnet-56", "lstm"]
batch_sizes = [2]
devices = ["cpu:1"]
iterations = 1
warmup = 0
timeout_s = 600
"""


def test_every_framework_runs_every_model_with_equal_size(tmp_path: Path) -> None:
    prof = tmp_path / "parity.toml"
    prof.write_text(PROFILE)
    db = tmp_path / "p.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                          "--headless", "--no-telemetry"], capture_output=True, text=True,
                         timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    conn = sqlite3.connect(db)
    rows = conn.execute("select j.framework, j.model, r.status, r.param_count, "
                        "r.flops_per_sample from runs r join jobs j on j.id = r.job_id").fetchall()
    conn.close()
    assert len(rows) == 21
    assert {(fw, m, st) for fw, m, st, _, _ in rows} == {
        (fw, m, "ok") for fw in ("torch", "tensorflow", "cntk") for m in COUNTS}
    for fw, model, _, params, _ in rows:
        assert params == COUNTS[model], (fw, model)
    flops: dict[str, set[float]] = {}
    for _, model, _, _, f in rows:
        flops.setdefault(model, set()).add(round(f))
    assert all(len(v) == 1 for v in flops.values()), flops
