"""Profile validation and expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.profiles.loader import builtin_names, load, parse
from dltop.profiles.model import DeviceSpec, JobSpec

GOOD = """
name = "t"
[defaults]
iterations = 3
warmup = 1
repeats = 2
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [8, 16]
devices = ["cpu:1", "cpu:2"]
"""


def err(text: str, cores: int = 2) -> str:
    with pytest.raises(UserError) as info:
        parse(text, "my.toml", "my", logical_cores=cores)
    msg = str(info.value)
    assert msg.startswith("my.toml"), msg
    return msg


def test_expansion_is_the_cartesian_product_times_repeats() -> None:
    prof = parse(GOOD, "my.toml", "my")
    assert len(prof.jobs) == 2 * 2 * 2 * 2
    first = prof.jobs[0]
    assert (first.model, first.batch_size, first.device.label, first.repeat) == \
        ("fcn-r", 8, "cpu:1", 0)
    # repeats are the outer loop: every configuration once, then again
    assert [j.repeat for j in prof.jobs] == [0] * 8 + [1] * 8
    assert prof.jobs[1].device.label == "cpu:2"
    assert {j.iterations for j in prof.jobs} == {3}
    assert prof.jobs[0].config_key == prof.jobs[8].config_key


def test_matrix_overrides_defaults() -> None:
    prof = parse(GOOD.replace('devices = ["cpu:1", "cpu:2"]',
                              'devices = ["cpu:1"]\niterations = 7'), "x", "x")
    assert {j.iterations for j in prof.jobs} == {7}


def test_job_spec_json_roundtrip() -> None:
    job = parse(GOOD, "x", "x").jobs[3]
    assert JobSpec.from_json_dict(job.to_json_dict()) == job


def test_toml_syntax_error_shows_line() -> None:
    msg = err('name = "x"\n[[matrix]\n')
    assert "TOML syntax error" in msg and "line 2" in msg


def test_unknown_key_is_named_with_suggestion() -> None:
    msg = err(GOOD.replace("iterations = 3", "iteratons = 3"))
    assert "defaults.iteratons" in msg and "did you mean 'iterations'" in msg
    msg = err(GOOD.replace('name = "t"', 'name = "t"\nbogus = 1'))
    assert "bogus: unknown key" in msg


def test_unknown_model_and_framework_list_valid_ones() -> None:
    msg = err(GOOD.replace('"alexnet-r"', '"alexnet"'))
    assert "matrix[0].models[1]" in msg and "resnet-56" in msg and "alexnet-r" in msg
    msg = err(GOOD.replace('["torch"]', '["pytorch"]'))
    assert "matrix[0].frameworks[0]" in msg and "tensorflow" in msg


@pytest.mark.parametrize("batch", ["0", "-4", "1.5", '"64"', "true"])
def test_bad_batch_sizes(batch: str) -> None:
    msg = err(GOOD.replace("[8, 16]", f"[8, {batch}]"))
    assert "matrix[0].batch_sizes[1]" in msg and "integer >= 1" in msg


def test_empty_matrix_and_missing_lists() -> None:
    assert "matrix is empty" in err('name = "x"\n')
    assert "matrix is empty" in err('name = "x"\nmatrix = []\n')
    msg = err('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\ndevices = ["cpu:1"]\n')
    assert "matrix[0].batch_sizes: missing" in msg


@pytest.mark.parametrize("dev", ["cpu", "gpu:0", "tpu:1", "cpu:x"])
def test_bad_devices(dev: str) -> None:
    assert "matrix[0].devices[0]" in err(GOOD.replace('"cpu:1", "cpu:2"', f'"{dev}"'))


def test_settings_are_validated() -> None:
    assert "defaults.warmup" in err(GOOD.replace("warmup = 1", "warmup = -1"))
    assert "precision" in err(GOOD.replace("warmup = 1", 'warmup = 1\nprecision = "fp64"'))
    assert "data_dir" in err(GOOD.replace("warmup = 1", 'warmup = 1\ndata = "real"'))
    assert "timeout_s" in err(GOOD.replace("warmup = 1", "warmup = 1\ntimeout_s = 0"))
    assert "inject" in err(GOOD.replace("warmup = 1", 'warmup = 1\ninject = "boom"'))


def test_global_batch_must_divide_over_gpus() -> None:
    msg = err(GOOD.replace('"cpu:1", "cpu:2"', '"gpu:3"'))
    assert "does not divide over 3 workers" in msg
    prof = parse(GOOD.replace('"cpu:1", "cpu:2"', '"gpu:2"'), "x", "x")
    assert prof.jobs[0].per_device_batch == 4
    per_dev = GOOD.replace('"cpu:1", "cpu:2"', '"gpu:3"').replace(
        "warmup = 1", 'warmup = 1\nbatch_scaling = "per-device"')
    job = parse(per_dev, "x", "x").jobs[0]
    assert (job.per_device_batch, job.samples_per_iter) == (8, 24)


def test_thread_ladder_follows_core_count() -> None:
    text = GOOD.replace('"cpu:1", "cpu:2"', '"cpu:1..max"').replace("repeats = 2", "")
    labels = lambda cores: sorted({j.device.count for j in parse(text, "x", "x", cores).jobs})  # noqa: E731
    assert labels(1) == [1]
    assert labels(6) == [1, 2, 4, 6]
    assert labels(16) == [1, 2, 4, 8, 16]


def test_missing_file_suggests_builtin(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="did you mean the built-in 'quick'"):
        load("quik")
    with pytest.raises(UserError, match="no such profile"):
        load(str(tmp_path / "nope.toml"))


def test_builtins_load_and_match_the_issue() -> None:
    assert set(builtin_names()) >= {"quick", "dlbench-cpu", "dlbench-gpu", "dlbench-scaling"}
    gpu = load("dlbench-gpu")
    assert {j.model for j in gpu.jobs} == {"fcn-s", "fcn-r", "alexnet-s", "alexnet-r",
                                           "resnet-50", "resnet-56", "lstm"}
    assert {j.framework for j in gpu.jobs} == {"torch", "tensorflow", "cntk"}
    assert {j.device for j in gpu.jobs} == {DeviceSpec("gpu", 1)}
    scaling = load("dlbench-scaling")
    assert {(j.model, j.batch_size) for j in scaling.jobs} == {
        ("fcn-r", 4096), ("alexnet-r", 1024), ("resnet-56", 128)}
    assert {j.device.count for j in scaling.jobs} == {1, 2, 4}
    cpu = load("dlbench-cpu", logical_cores=4)
    assert {j.device.count for j in cpu.jobs} == {1, 2, 4}
    quick = load("quick")
    assert {j.framework for j in quick.jobs} == {"torch", "tensorflow", "cntk"}
    assert all(j.device.kind == "cpu" for j in quick.jobs)
