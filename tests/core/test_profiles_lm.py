"""Transformer jobs in profiles: defaults from the runners' lm_catalog, limits, refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.profiles import lm
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import builtin_names, load, parse

LM = """
[[matrix]]
frameworks = {frameworks}
models = {models}
batch_sizes = [4]
devices = {devices}
{extra}
"""


def profile(extra: str = "", models: str = '["gpt-tiny"]', frameworks: str = '["torch"]',
            devices: str = '["cpu:1"]') -> str:
    return LM.format(extra=extra, models=models, frameworks=frameworks, devices=devices)


def jobs(extra: str = "", **kw: str) -> tuple[JobSpec, ...]:
    return parse(profile(extra, **kw), "lm.toml", "lm", logical_cores=4).jobs


def err(extra: str = "", **kw: str) -> str:
    with pytest.raises(UserError) as info:
        jobs(extra, **kw)
    msg = str(info.value)
    assert msg.startswith("lm.toml: "), msg
    return msg


def test_train_defaults_come_from_the_model_and_adamw() -> None:
    (tiny, small) = jobs(models='["gpt-tiny", "gpt2-small"]')
    assert (tiny.seq_len, small.seq_len) == (128, 1024)
    assert tiny.attention == "fused" and tiny.prompt_tokens is None and tiny.new_tokens is None
    assert (tiny.optimizer, tiny.lr, tiny.weight_decay) == ("adamw", 6e-4, 0.1)
    assert tiny.describe() == "torch gpt-tiny b4x128 cpu:1 #1"


def test_a_mixed_entry_keeps_the_cnn_defaults() -> None:
    cnn, tiny = jobs(models='["fcn-r", "gpt-tiny"]')
    assert (cnn.optimizer, cnn.lr, cnn.weight_decay, cnn.seq_len, cnn.attention) == (
        "sgd", 0.01, 0.0, None, None)
    assert cnn.describe() == "torch fcn-r b4 cpu:1 #1"
    assert tiny.optimizer == "adamw" and tiny.seq_len == 128


def test_the_users_optimizer_settings_win() -> None:
    (job,) = jobs('optimizer = "sgd"')
    assert (job.optimizer, job.lr, job.weight_decay) == ("sgd", 0.01, 0.0)
    (job,) = jobs("lr = 3e-4")
    assert (job.optimizer, job.lr, job.weight_decay) == ("adamw", 3e-4, 0.1)
    (job,) = jobs("weight_decay = 0.0\nseq_len = 64\nattention = \"plain\"")
    assert (job.weight_decay, job.seq_len, job.attention) == (0.0, 64, "plain")


def test_generate_defaults_and_label() -> None:
    (job,) = jobs('mode = "generate"')
    assert (job.seq_len, job.prompt_tokens, job.new_tokens) == (None, 128, 128)
    assert job.describe() == "torch gpt-tiny b4 gen128+128 cpu:1 #1"
    (job,) = jobs('mode = "generate"\nprompt_tokens = 16\nnew_tokens = 8')
    assert (job.prompt_tokens, job.new_tokens) == (16, 8)


def test_defaults_are_the_runners_table() -> None:
    for name in ("gpt-tiny", "gpt2-small", "gpt2-medium", "llama-1b"):
        (job,) = jobs(models=f'["{name}"]')
        assert job.seq_len == lm.shape(name)["seq_len"]
    assert lm.param_count("gpt2-small") == 124_439_808


def test_seq_len_over_the_context() -> None:
    msg = err("seq_len = 257")
    assert "matrix[0].seq_len: seq_len 257 is over gpt-tiny's context of 256" in msg
    assert jobs("seq_len = 256")[0].seq_len == 256


def test_prompt_plus_new_over_the_context() -> None:
    msg = err('mode = "generate"\nprompt_tokens = 200\nnew_tokens = 57')
    assert "matrix[0].new_tokens:" in msg and "= 257 is over gpt-tiny's context of 256" in msg


@pytest.mark.parametrize(("key", "value"), [("seq_len", "64"), ("attention", '"plain"')])
def test_transformer_keys_on_a_cnn(key: str, value: str) -> None:
    msg = err(f"{key} = {value}", models='["resnet-50"]')
    assert f"matrix[0].{key}: {key} applies to the transformer models" in msg
    assert "not resnet-50" in msg


@pytest.mark.parametrize("key", ["prompt_tokens", "new_tokens"])
def test_generation_keys_without_generate(key: str) -> None:
    msg = err(f"{key} = 8")
    assert f'matrix[0].{key}: {key} applies to mode = "generate" or "serve" only' in msg


def test_generation_keys_on_a_cnn_name_the_model() -> None:
    msg = err('mode = "generate"\nnew_tokens = 8', models='["lstm"]')
    assert "matrix[0].new_tokens: new_tokens applies to the transformer models" in msg


def test_generate_on_a_cnn() -> None:
    msg = err('mode = "generate"', models='["lstm"]')
    assert 'matrix[0].mode: mode = "generate" applies to the transformer models' in msg


def test_cntk_refuses_transformers() -> None:
    msg = err(frameworks='["torch", "cntk"]')
    assert "matrix[0].frameworks: CNTK does not build the transformer models" in msg


@pytest.mark.parametrize("devices", ['["cpus:2"]', '["gpu:2"]'])
def test_generate_over_several_workers(devices: str) -> None:
    msg = err('mode = "generate"', devices=devices)
    assert 'matrix[0].devices: mode = "generate" runs on one device' in msg


def test_generate_over_several_nodes() -> None:
    msg = err('mode = "generate"\nexecutor = "slurm"\nnodes = 2', devices='["gpu:1"]')
    assert 'matrix[0].nodes: mode = "generate" runs on one device' in msg


def test_generate_with_epochs_seq_len_or_real_data() -> None:
    real = 'data = "real"\ndata_dir = "/d"'
    assert "matrix[0].epochs: epochs is for training" in err(
        f'mode = "generate"\n{real}\nepochs = 1')
    assert "matrix[0].seq_len: seq_len is the sequence of training" in err(
        'mode = "generate"\nseq_len = 64')
    assert "matrix[0].data: mode = \"generate\" prompts with synthetic" in err(
        f'mode = "generate"\n{real}')


def test_a_default_names_its_table() -> None:
    text = '[defaults]\nseq_len = 64\n' + profile(models='["fcn-r"]')
    with pytest.raises(UserError, match=r"lm.toml: defaults.seq_len: seq_len applies"):
        parse(text, "lm.toml", "lm")


def test_the_cli_exits_2_naming_file_key_and_limit(tmp_path: Path) -> None:
    bad = tmp_path / "long.toml"
    bad.write_text(profile("seq_len = 4096", models='["gpt2-small"]'))
    env = {**os.environ, "DLTOP_DB": str(tmp_path / "d.db")}
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(bad)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 2, res.stderr
    assert f"{bad}: matrix[0].seq_len: seq_len 4096 is over gpt2-small's context of 1024" \
        in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "d.db").exists()


def test_builtin_llm_profiles() -> None:
    assert {"llm-cpu", "llm-gpu"} <= set(builtin_names())
    cpu = load("llm-cpu", logical_cores=2)
    assert {j.framework for j in cpu.jobs} == {"torch", "jax", "tensorflow"}
    assert {j.model for j in cpu.jobs} == {"gpt-tiny"}
    assert {j.mode for j in cpu.jobs} == {"train", "generate"}
    assert all(j.device.kind == "cpu" for j in cpu.jobs)
    assert {j.batch_size for j in cpu.jobs if j.mode == "generate"} == {1, 4}
    assert {j.seq_len for j in cpu.jobs if j.mode == "train"} == {128}
    gpu = load("llm-gpu")
    assert {j.model for j in gpu.jobs} == {"gpt2-small", "llama-1b"}
    assert {j.precision for j in gpu.jobs} == {"bf16"}
    assert {j.device.label for j in gpu.jobs} == {"gpu:1"}
    train = [j for j in gpu.jobs if j.mode == "train"]
    assert {j.seq_len for j in train} == {1024, 2048}
    assert {j.torch_compile for j in train if j.framework == "torch"} == {"off", "default"}
    assert {j.batch_size for j in gpu.jobs if j.mode == "generate"} == {1, 8, 32}
    assert "jax" in {j.framework for j in gpu.jobs}


def test_docs_models_table_is_the_catalog() -> None:
    import re

    text = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    for name in ("gpt-tiny", "gpt2-small", "gpt2-medium", "llama-1b"):
        s = lm.shape(name)
        row = re.search(rf"^\| `{name}` \| [^|]+ \| (.+)$", text, re.M)
        assert row is not None, name
        cells = [c.strip().replace(",", "") for c in row[1].split("|") if c.strip()]
        assert cells == [str(s["layers"]), str(s["d_model"]), f"{s['heads']} ({s['kv_heads']})",
                         str(s["ffn"]), str(s["vocab"]), str(s["context"]), str(s["seq_len"]),
                         str(lm.param_count(name))], name
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (\d+) \| ([\d,]+) \| ([\d,]+) \|$", text,
                      re.M)
    assert len(rows) == 5
    for name, seq, train, infer in rows:
        flops = lm.flops_per_token(name, int(seq), "train")
        assert flops == int(train.replace(",", "")), name
        assert lm.flops_per_token(name, int(seq), "inference") == int(infer.replace(",", ""))
