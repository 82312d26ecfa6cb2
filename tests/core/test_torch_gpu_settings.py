"""The PyTorch runner's GPU settings at load: checks, framework refusal, identity."""

from __future__ import annotations

import pytest

from dltop.errors import UserError
from dltop.profiles.loader import parse

BASE = """
[defaults]
frameworks = ["{fw}"]
models = ["{model}"]
batch_sizes = [8]
devices = ["gpu:1"]
{extra}
[[matrix]]
"""


def load(extra: str, fw: str = "torch", model: str = "alexnet-r") -> list:  # type: ignore[type-arg]
    return list(parse(BASE.format(fw=fw, model=model, extra=extra), "g.toml", "g").jobs)


def err(extra: str, fw: str = "torch", model: str = "alexnet-r") -> str:
    with pytest.raises(UserError) as info:
        load(extra, fw, model)
    return str(info.value)


def test_defaults_and_values_reach_the_job_and_its_spec() -> None:
    (job,) = load("")
    assert (job.channels_last, job.torch_compile, job.cudnn_benchmark, job.cuda_graphs) == (
        False, "off", True, False)
    (job,) = load('channels_last = true\ncompile = "max-autotune"\ncudnn_benchmark = false')
    assert (job.channels_last, job.torch_compile, job.cudnn_benchmark) == (
        True, "max-autotune", False)
    d = job.to_json_dict()
    assert (d["channels_last"], d["torch_compile"], d["cudnn_benchmark"]) == (
        True, "max-autotune", False)


@pytest.mark.parametrize(("extra", "key", "expected"), [
    ('channels_last = "yes"', "channels_last", "expected true or false"),
    ('compile = "fast"', "compile", "unknown value 'fast'"),
    ("compile = true", "compile", "unknown value true"),
    ("cudnn_benchmark = 1", "cudnn_benchmark", "expected true or false"),
    ('cuda_graphs = "on"', "cuda_graphs", "expected true or false"),
])
def test_bad_values_name_the_file_and_key(extra: str, key: str, expected: str) -> None:
    msg = err(extra)
    assert msg.startswith(f"g.toml: defaults.{key}: ") and expected in msg, msg


def test_compile_lists_the_modes() -> None:
    msg = err('compile = "reduce_overhead"')
    assert "did you mean 'reduce-overhead'" in msg
    assert "off, default, reduce-overhead, max-autotune" in msg


@pytest.mark.parametrize("fw", ["tensorflow", "cntk"])
@pytest.mark.parametrize(("extra", "key"), [
    ("channels_last = true", "channels_last"), ('compile = "default"', "compile"),
    ("cudnn_benchmark = false", "cudnn_benchmark"), ("cuda_graphs = true", "cuda_graphs")])
def test_another_framework_refuses_a_torch_setting(fw: str, extra: str, key: str) -> None:
    msg = err(extra, fw=fw)
    assert f"defaults.{key}: {key} applies to the PyTorch runner only, not {fw}" in msg


def test_another_framework_accepts_the_default_written_out() -> None:
    (job,) = load("cudnn_benchmark = true\ncompile = \"off\"", fw="tensorflow")
    assert job.framework == "tensorflow" and job.cudnn_benchmark is True


@pytest.mark.parametrize("model", ["fcn-r", "fcn-s", "lstm"])
def test_channels_last_is_for_image_models(model: str) -> None:
    msg = err("channels_last = true", model=model)
    assert f"channels_last applies to image models, not {model}" in msg


def test_cuda_graphs_and_compile_exclude_each_other() -> None:
    msg = err('cuda_graphs = true\ncompile = "default"')
    assert "defaults.cuda_graphs: cuda_graphs and compile exclude each other" in msg


def test_each_setting_is_identity() -> None:
    (plain,) = load("")
    for extra in ("channels_last = true", 'compile = "default"', "cudnn_benchmark = false",
                  "cuda_graphs = true"):
        (job,) = load(extra)
        assert job.config_key != plain.config_key, extra
    assert plain.identity()["torch_compile"] == "off"
    assert plain.identity()["cudnn_benchmark"] is True


def test_a_setup_event_joins_the_hello_facts_without_overriding_them() -> None:
    import json

    from dltop.jobs.eventreader import EventReader

    seen: list[dict] = []  # type: ignore[type-arg]
    reader = EventReader(seen.append)
    hello = {"v": 1, "event": "hello", "framework": "torch", "framework_version": "2",
             "device": "cuda:0", "threads": None}
    reader.handle(json.dumps(hello).encode())
    reader.handle(json.dumps({"v": 1, "event": "setup", "compile_s": 12.5,
                               "capture_s": None, "device": "forged"}).encode())
    assert reader.protocol_errors == 0
    assert reader.hello["compile_s"] == 12.5 and reader.hello["device"] == "cuda:0"
    assert [e["event"] for e in seen] == ["hello", "setup"]
