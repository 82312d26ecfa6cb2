"""Parity: every framework x every model runs through dltop itself and reports the same size.

One campaign, 3 frameworks (4 once dltop has its JAX runner) x 9 models at batch 2, one
measured iteration each, plus ResNet-50 at ``input_size`` 32 and ResNet-56 at 64, through
the real engine, supervisor and runners. Every run must end ``ok``, and the parameter
count and FLOPs each runner reports must equal docs/models.md's count and each other (at
an ``input_size``, the FLOPs of that size). JAX's models are also compared with torch's
in process (shapes only), without TensorFlow or CNTK.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dltop import catalog
from dltop.runners.child import torch_models

from .test_cntk_runner import COUNTS

# JAX joins once dltop has its runner (issue 18); jax itself is in the dev venv.
FRAMEWORKS = ("torch", "tensorflow", "cntk") + (("jax",) if "jax" in catalog.FRAMEWORKS else ())

PROFILE = """
name = "parity"
[defaults]
frameworks = [{}]
batch_sizes = [2]
devices = ["cpu:1"]
iterations = 1
warmup = 0
timeout_s = 600
[[matrix]]
models = ["fcn-s", "fcn-r", "alexnet-s", "alexnet-r", "resnet-50", "resnet-56", "lstm",
          "lenet", "vgg16"]
[[matrix]]
models = ["resnet-50"]
input_size = 32
[[matrix]]
models = ["resnet-56"]
input_size = 64
""".format(", ".join(f'"{fw}"' for fw in FRAMEWORKS))
SIZES = {"resnet-50": 32, "resnet-56": 64}


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.cntk
def test_every_framework_runs_every_model_with_equal_size(tmp_path: Path) -> None:
    prof = tmp_path / "parity.toml"
    prof.write_text(PROFILE)
    db = tmp_path / "p.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                          "--headless", "--no-telemetry"], capture_output=True, text=True,
                         timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    conn = sqlite3.connect(db)
    rows = conn.execute("select j.framework, j.model, j.spec_json, r.status, r.param_count, "
                        "r.flops_per_sample from runs r join jobs j on j.id = r.job_id").fetchall()
    conn.close()
    assert len(rows) == len(FRAMEWORKS) * (9 + 2)
    sized = [(fw, m, st, p, f, json.loads(spec).get("input_size")) for fw, m, spec, st, p, f
             in rows]
    assert {(fw, m, size, st) for fw, m, st, _, _, size in sized} == {
        (fw, m, None, "ok") for fw in FRAMEWORKS for m in COUNTS} | {
        (fw, m, size, "ok") for fw in FRAMEWORKS for m, size in SIZES.items()}
    for fw, model, _, params, _, size in sized:
        assert params == COUNTS[model], (fw, model, size)
    flops: dict[tuple[str, int | None], set[float]] = {}
    for _, model, _, _, f, size in sized:
        flops.setdefault((model, size), set()).add(round(f))
    assert all(len(v) == 1 for v in flops.values()), flops
    for model, size in SIZES.items():
        assert flops[(model, size)] == {
            round(torch_models.training_flops_per_sample(model, input_size=size))}


# Shapes only in JAX; torch builds the model (a second or two for VGG16 and FCN-S).
@pytest.mark.parametrize(("model", "size"), [(m, None) for m in COUNTS] + list(SIZES.items()))
def test_jax_models_equal_torch_in_size_and_flops(model: str, size: int | None) -> None:
    from dltop.runners.child import jax_models

    abstract = jax_models.abstract_model(model, size)  # shapes only: nothing allocated
    assert jax_models.param_count(abstract.params) == COUNTS[model]
    assert jax_models.param_count(abstract.params) == torch_models.param_count(
        torch_models.build(model, size))
    assert jax_models.training_flops_per_sample(model, size) == (
        torch_models.training_flops_per_sample(model, input_size=size))
