"""Profile validation and expansion."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dltop.errors import UserError
from dltop.profiles.device import DeviceSpec
from dltop.profiles.entry import SETTINGS
from dltop.profiles.jobspec import JobSpec, settings
from dltop.profiles.loader import builtin_names, load, parse
from dltop.profiles.references import Reference
from dltop.profiles.slurm import SlurmSettings
from dltop.store.db import memory_db
from dltop.store.rows import job_row

DOCS = Path(__file__).resolve().parents[2] / "docs"

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


def _unusual_job() -> JobSpec:
    """A job whose every field differs from its default and from the loader's values."""
    return JobSpec(
        profile="p", framework="command", model="m", batch_size=6, device=DeviceSpec("cpus", 3),
        repeat=2, iterations=7, warmup=3, min_time_s=2.5, warmup_s=0.5, timeout_s=12.5,
        precision="bf16", data="real",
        data_dir="/d", batch_scaling="per-device", lr=0.5, momentum=0.9, seed=4,
        options=(("command", ("prog", "{batch}")), ("inject", "nan"), ("xla", True)),
        retries=2, cooldown_s=1.5, cooldown_temp_c=60.0, cooldown_power_w=80.0,
        optimizer="adamw", weight_decay=0.1, mode="inference", epochs=3, eval_every="epoch",
        target_accuracy=0.9, target_perplexity=120.0, shuffle=True, op_profile=True, input_size=64,
        data_loader="host", loader_workers=2, channels_last=True, torch_compile="default",
        cudnn_benchmark=False, cuda_graphs=True, fp8_recipe="rowwise", seq_len=64,
        attention="plain", prompt_tokens=16, new_tokens=8, request_rate=2.5, concurrency=3,
        server="fake", prefix_tokens=32, prefix_groups=4, prompt_tokens_spread=0.5,
        new_tokens_spread=0.25, shape="gpt2-small", nodes=2, executor="slurm",
        slurm=SlurmSettings(partition="gpu", time="10", extra_args=("--qos=x",),
                            cpus_per_gpu=8, parallel=3),
        system="site", references=(Reference("s_per_iter", 0.5, -0.1, 0.2, "m/*/*"),))


def test_every_field_round_trips_through_the_runner_spec() -> None:
    job = _unusual_job()
    for f in dataclasses.fields(JobSpec):  # the fixture really exercises every field
        if f.default is not dataclasses.MISSING:
            assert getattr(job, f.name) != f.default, f.name
    d = json.loads(json.dumps(job.to_json_dict()))
    assert JobSpec.from_json_dict(d) == job
    # protocol v1: every field under its name, plus the keys runners rely on
    assert set(d) == {f.name for f in dataclasses.fields(JobSpec)} | {
        "v", "per_device_batch", "samples_per_iter"}
    assert (d["v"], d["device"], d["per_device_batch"], d["samples_per_iter"]) == (
        1, {"kind": "cpus", "count": 3}, 6, 36)
    assert d["options"] == {"command": ["prog", "{batch}"], "inject": "nan", "xla": True}


def test_an_older_spec_without_the_later_fields_takes_their_defaults() -> None:
    d = _unusual_job().to_json_dict()
    for key in ("retries", "cooldown_s", "cooldown_temp_c", "cooldown_power_w", "options"):
        del d[key]
    job = JobSpec.from_json_dict(d)
    assert (job.retries, job.cooldown_s, job.cooldown_temp_c, job.options) == (0, 0.0, None, ())


def test_loader_settings_are_the_setting_fields() -> None:
    # repeats expands into the field `repeat`; every other setting is a field
    assert set(SETTINGS) - {"repeats"} == set(settings())
    # but min_time_s: a profile gets the product's window, a stored job without it had 0
    assert all(SETTINGS[k] == f.default for k, f in settings().items() if k != "min_time_s")
    assert SETTINGS["min_time_s"] == 6.0 and settings()["min_time_s"].default == 0.0
    job = parse(GOOD, "x", "x").jobs[0]  # (the tests' DLTOP_DEFAULT_MIN_TIME_S is 0)
    # shuffle is resolved by the loader (true for real data, false for synthetic)
    assert all(getattr(job, f.name) == f.default for k, f in settings().items()
               if k not in ("iterations", "warmup", "shuffle"))
    assert job.shuffle is False


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_every_setting_is_checked(key: str) -> None:
    msg = err(GOOD + f"{key} = {{ a = 1 }}\n")
    assert f"matrix[0].{key}: " in msg and ("expected" in msg or "unknown value" in msg)


def test_job_row_covers_the_jobs_table() -> None:
    db = memory_db()
    db["campaigns"].insert({"id": 1, "name": "c", "status": "queued", "created_at": "now"})
    job = _unusual_job()
    row = job_row(1, 0, "queued", job)
    # ``template``: a compact row's reference to its stored spec (dltop.store.templates)
    assert set(row) == set(db["jobs"].columns_dict) - {"id", "template"}
    db["jobs"].insert(row)
    stored = next(db.query("select * from jobs"))
    assert (stored["device"], stored["device_kind"], stored["device_count"]) == (
        "cpus:3", "cpus", 3)
    assert (stored["batch_size"], stored["repeat"], stored["config_key"]) == (6, 2, job.config_key)
    assert JobSpec.from_json_dict(json.loads(stored["spec_json"])) == job


def _documented_defaults() -> dict[str, str]:
    text = (DOCS / "profiles.md").read_text()
    return {m[1]: m[2].strip().strip("`") for m in re.finditer(
        r"^\| `([a-z0-9_]+)` \| either \|[^|]*\|([^|]*)\|", text, re.M)}


def test_docs_give_every_setting_with_its_default() -> None:
    documented = _documented_defaults()
    for key, default in SETTINGS.items():
        shown = documented[key]
        value: Any = None if shown in ("—", "absent") else shown
        if isinstance(default, bool):
            value = {"true": True, "false": False}.get(shown, shown)
        elif isinstance(default, int | float) and value is not None:
            value = float(value)
        assert value == default, (key, shown)


def test_toml_syntax_error_shows_line() -> None:
    msg = err('name = "x"\n[[matrix]\n')
    assert "TOML syntax error" in msg and "line 2" in msg


def test_unknown_key_is_named_with_suggestion() -> None:
    msg = err(GOOD.replace("iterations = 3", "iteratons = 3"))
    assert "defaults.iteratons" in msg and "did you mean 'iterations'" in msg
    msg = err(GOOD.replace('name = "t"', 'name = "t"\nbogus = 1'))
    assert "bogus: unknown key" in msg


@pytest.mark.parametrize(("line", "says"), [
    ("pack = true", "defaults.pack: unknown key; pack is a top-level key: write it at the "
     "top of the file, before any [table]"),
    ("slurm = 1", "defaults.slurm: unknown key; slurm is a top-level key: a table of its "
     "own ([slurm]), not a key of this one"),
])
def test_a_top_level_key_in_a_table_says_where_it_goes(line: str, says: str) -> None:
    """docs/profiles.md showed [defaults] taking 'any key below except name/description':
    pack in [defaults] then met a bare 'unknown key'."""
    assert says in err(GOOD.replace("iterations = 3", f"iterations = 3\n{line}"))


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
    # the file named without its suffix, and a directory, say what they are
    (tmp_path / "sweep.toml").write_text("")
    with pytest.raises(UserError, match=r"sweep: no such profile .*did you mean '.*sweep\.toml'"):
        load(str(tmp_path / "sweep"))
    with pytest.raises(UserError, match="a directory, not a profile file"):
        load(str(tmp_path))


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
    assert {j.framework for j in quick.jobs} == {"torch", "tensorflow", "cntk", "jax"}
    assert all(j.device.kind == "cpu" for j in quick.jobs)


def test_profiles_show_names_epochs_and_the_other_settings(capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    from dltop.cli import main

    example = Path(__file__).parents[2] / "docs" / "examples" / "convergence.toml"
    assert main(["profiles", "show", str(example)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "other settings" in lines[2]
    first = lines[3].split()
    assert first[1:3] == ["torch", "lenet"] and "3ep" in first
    assert "optimizer=adam" in lines[3] and "target_accuracy=0.95" in lines[3]
    assert any("mode=inference" in line and " 200 " in line for line in lines)


@pytest.mark.parametrize(("line", "says"), [
    ("[[defaults.matrix]]\nbatch_sizes = [8]", "defaults.matrix: unknown key; matrix is a "
     "top-level key: a table of its own ([[matrix]]), not a key of this one"),
    ('[defaults.servers.fake]\ncommand = "x --port {port}"', "defaults.servers: unknown key; "
     "servers is a top-level key: a table of its own ([servers.NAME]), not a key of this one"),
])
def test_a_top_level_table_in_a_table_is_named_as_toml_writes_it(line: str, says: str) -> None:
    """[matrix] (what the hint said before) is not how a matrix entry is written: a user
    who followed it met another refusal."""
    assert says in err(GOOD.replace("iterations = 3", f"iterations = 3\n{line}"))
