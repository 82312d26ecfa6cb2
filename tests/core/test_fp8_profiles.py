"""precision = "fp8" is refused at load where it cannot run (another framework, a CPU,
an image model, generation, a recipe without fp8), naming the file and the key, and at
preflight on GPUs older than compute capability 8.9, the capability read from a FAKE
NVML (pynvml injected at the hardware boundary, as tests/core/test_cntk_gpu_preflight)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.core.test_cntk_gpu_preflight import gpus  # noqa: F401 - the fake-NVML fixture

from dltop.errors import UserError
from dltop.jobs import campaign
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.results.idread import identity_of
from dltop.store import Store
from dltop.store.db import memory_db

PROFILE = """
[[matrix]]
frameworks = ["{fw}"]
models = ["{model}"]
batch_sizes = [8]
devices = ["{device}"]
precision = "{precision}"
{extra}
"""


def text(fw: str = "torch", model: str = "gpt2-small", device: str = "gpu:1",
         precision: str = "fp8", extra: str = "") -> str:
    return PROFILE.format(fw=fw, model=model, device=device, precision=precision, extra=extra)


def ident(job: JobSpec) -> dict[str, Any]:
    return identity_of(json.dumps(job.to_json_dict()), None)


def refusal(**kw: str) -> str:
    with pytest.raises(UserError) as info:
        parse(text(**kw), "f8.toml", "f8")
    return str(info.value)


def test_fp8_torch_training_on_a_gpu_loads_with_the_default_recipe() -> None:
    job = parse(text(), "f8.toml", "f8").jobs[0]
    assert (job.precision, job.fp8_recipe) == ("fp8", "tensorwise")
    rowwise = parse(text(extra='fp8_recipe = "rowwise"'), "f8.toml", "f8").jobs[0]
    assert rowwise.fp8_recipe == "rowwise"
    assert ident(job)["fp8_recipe"] == "tensorwise"
    bf16 = parse(text(precision="bf16"), "f8.toml", "f8").jobs[0]
    assert bf16.fp8_recipe is None and "fp8_recipe" not in ident(bf16)


@pytest.mark.parametrize(("fw", "model", "why"), [
    ("tensorflow", "gpt2-small", "tensorflow has no fp8 training path"),
    ("jax", "gpt2-small", "JAX's fp8 (jax.numpy.float8 dot products) is not built in dltop"),
    ("cntk", "fcn-r", "cntk has no fp8 training path"),
])
def test_other_frameworks_are_refused(fw: str, model: str, why: str) -> None:
    assert refusal(fw=fw, model=model) == (
        'f8.toml: matrix[0].precision: precision = "fp8" runs in PyTorch only (torchao '
        f"float8 training); {why} (docs/profiles.md)")


def test_a_cpu_device_is_refused() -> None:
    assert refusal(device="cpu:2") == (
        'f8.toml: matrix[0].precision: precision = "fp8" needs a GPU of compute capability '
        "8.9 or later (H100, H200, L40S); cpu:2 has no fp8 matrix units")


def test_image_models_generation_and_a_stray_recipe_are_refused() -> None:
    assert "not resnet-50: torchao converts linear layers only" in refusal(model="resnet-50")
    assert refusal(extra='mode = "generate"').endswith(
        "precision = \"fp8\" is for training (torchao float8 training); mode is 'generate'")
    assert refusal(precision="bf16", extra='fp8_recipe = "rowwise"') == (
        'f8.toml: matrix[0].fp8_recipe: fp8_recipe applies to precision = "fp8" only '
        "(precision is 'bf16')")
    assert "matrix[0].fp8_recipe" in refusal(extra='fp8_recipe = "blockwise"')


def test_the_cli_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "f8.toml"
    bad.write_text(text(fw="tensorflow"))
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(bad)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 2, res.stderr
    assert f'{bad}: matrix[0].precision: precision = "fp8" runs in PyTorch only' in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "d.db").exists()


def plan(n_gpus: int, device: str = "gpu:1", skip: bool = False) -> campaign.Plan:
    prof = parse(text(device=device), "f8.toml", "f8")
    return campaign.preflight([prof], n_gpus, skip_unavailable=skip)


def test_a_compute_capability_8_0_gpu_is_refused_at_preflight(gpus: Any) -> None:  # noqa: F811
    n = gpus((8, 0))
    with pytest.raises(UserError) as info:
        plan(n)
    assert ('gpu:1 with precision = "fp8": fp8 training needs a GPU of compute capability '
            "8.9 or later (H100, H200, L40S); this host's GPUs are compute capability 8.0 "
            "(use bf16 there)") in str(info.value)


def test_with_skip_unavailable_it_is_stored_unsatisfiable(gpus: Any) -> None:  # noqa: F811
    n = gpus((8, 6), (8, 6))
    p = plan(n, skip=True)
    store = Store(memory_db())
    _, queued = campaign.create(store, p, ["dltop"])
    assert queued == []
    row = next(iter(store.db.query("select status, error_message from runs")))
    assert row["status"] == "unsatisfiable" and "compute capability 8.6" in row["error_message"]


@pytest.mark.parametrize("caps", [((9, 0),), ((8, 9),), (None,), ((8, 0), (9, 0))])
def test_capability_8_9_or_unknown_passes(gpus: Any, caps: Any) -> None:  # noqa: F811
    n = gpus(*caps)
    job = parse(text(), "f8.toml", "f8").jobs[0]
    assert campaign.fp8_gpu_problem(job, n, campaign._Capabilities(n)) is None


def test_two_gpus_need_two_able_ones(gpus: Any) -> None:  # noqa: F811
    n = gpus((8, 0), (9, 0))
    job = parse(text(device="gpu:2"), "f8.toml", "f8").jobs[0]
    problem = campaign.fp8_gpu_problem(job, n, campaign._Capabilities(n))
    assert problem is not None and "compute capability 8.0, 9.0" in problem


def test_the_prepared_gpu_profile_loads_and_preflights_on_an_h100(gpus: Any) -> None:  # noqa: F811
    # scripts/gpu_check_fp8.toml: not run yet (no GPU); it must at least load, pass
    # preflight on compute capability 9.0 and have its fp8 entries refused on 8.0
    from dltop.profiles.loader import load

    prof = load(str(Path(__file__).parents[2] / "scripts" / "gpu_check_fp8.toml"))
    fp8 = [j for j in prof.jobs if j.precision == "fp8"]
    assert {(j.model, j.fp8_recipe) for j in fp8} == {
        ("gpt2-small", "tensorwise"), ("llama-1b", "tensorwise"), ("llama-1b", "rowwise")}
    assert campaign.preflight([prof], gpus((9, 0)), skip_unavailable=False).problems == \
        (None,) * len(prof.jobs)
    older = campaign.preflight([prof], gpus((8, 0)), skip_unavailable=True)
    assert [p is not None for p in older.problems] == [j.precision == "fp8"
                                                       for j in prof.jobs]
