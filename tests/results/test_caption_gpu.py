"""The caption's GPU and driver fields say what ran: a GPU job the host could not run
(``--skip-unavailable``, stored ``unsatisfiable``) is no GPU run (docs/exports.md:
"`GPU none` means no configuration ran on a GPU")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one real PyTorch run

PROFILE = """[[matrix]]
frameworks = ["torch"]
models = ["lenet"]
batch_sizes = [8]
devices = ["cpu:1", "gpu:64"]
iterations = 3
warmup = 1
min_time_s = 0
batch_scaling = "per-device"
"""


def dltop(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args, "--db", str(db)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DLTOP_FAKE_GPUS": ""})


def test_an_unsatisfiable_gpu_job_leaves_the_caption_gpu_none(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE)
    db = tmp_path / "d.db"
    ran = dltop(db, "run", "--no-telemetry", "--skip-unavailable", str(profile))
    assert ran.returncode == 0, ran.stderr
    assert "1 ok, 1 unsatisfiable" in ran.stdout
    out = dltop(db, "export").stdout
    assert "| lenet | torch | 8 |" in out and "gpu:64" in out  # its column: n/a
    assert "; GPU none; driver n/a (no GPU);" in out
    assert "GPU unknown" not in out
