"""FLOPs per sample follow the run's mode: a training step is 3 x forward, inference 1 x."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.runners.child import model_catalog


def test_inference_counts_the_forward_pass_only() -> None:
    assert model_catalog.flops_for_mode(2_499_120, "train") == 2_499_120
    assert model_catalog.flops_for_mode(2_499_120, None) == 2_499_120  # older specs
    assert model_catalog.flops_for_mode(2_499_120, "inference") == 833_040
    assert model_catalog.flops_for_mode(None, "inference") is None


@pytest.mark.slow
def test_an_inference_run_stores_forward_flops(tmp_path: Path) -> None:
    prof = tmp_path / "f.toml"
    prof.write_text('name = "f"\n[defaults]\nframeworks = ["torch"]\nmodels = ["lenet"]\n'
                    'batch_sizes = [1]\ndevices = ["cpu:1"]\niterations = 2\nwarmup = 0\n'
                    '[[matrix]]\nmode = "inference"\n[[matrix]]\nmode = "train"\n')
    db = tmp_path / "f.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                          "--headless", "--no-telemetry"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    with sqlite3.connect(db) as conn:
        flops = sorted(r[0] for r in conn.execute("select flops_per_sample from runs"))
    assert flops == [833_040, 2_499_120]
