"""MBU, prefill TFLOP/s and the two FLOPs conventions (issue 42 items 5 and 7): the
bytes and FLOPs against hand computations for gpt2-small, and the exported cells of
stored runs (an H200's and a CPU's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from dltop.profiles import lm
from dltop.results import export, lmcost
from dltop.results.aggregate import config_results
from dltop.results.metrics import value_of
from dltop.results.render import render
from dltop.store import Store, connect, memory_db
from dltop.store.generations import pack_seconds

CAT = lm.lm_catalog()
N_GPT2 = 124_439_808
"""gpt2-small's parameters (tests/results/test_tokens.py derives it)."""
WEIGHTS_BF16 = (N_GPT2 - 1024 * 768) * 2
"""Every weight but the learned positions, 2 bytes each: 247 306 752."""
KV_BF16 = 2 * 12 * 12 * 64 * 2
"""Keys and values of one position, 12 layers x 12 heads x 64, bf16: 36 864 bytes."""


def decode_bytes(name: str, position: int, batch: int, bytes_per_value: int) -> int:
    """Bytes the decode step of the token at ``position`` (0-based) must move: the weights
    once, the cached keys and values of positions 0 .. position-1 read for each of
    ``batch`` sequences, and the step's own position written."""
    kv = CAT.kv_bytes_per_position(name, bytes_per_value) * batch
    return int(CAT.weight_bytes(name, bytes_per_value) + kv * (position + 1))


def test_decode_bytes_of_gpt2_small_by_hand() -> None:
    assert WEIGHTS_BF16 == 247_306_752 and KV_BF16 == 36_864
    # the token at position 200: 200 cached positions read, its own written
    assert decode_bytes("gpt2-small", 200, 1, 2) == WEIGHTS_BF16 + 201 * KV_BF16 \
        == 254_716_416
    # batch 8 reads eight caches and the weights once
    assert decode_bytes("gpt2-small", 200, 8, 2) == WEIGHTS_BF16 + 8 * 201 * KV_BF16
    assert decode_bytes("gpt2-small", 200, 1, 4) == 2 * decode_bytes(
        "gpt2-small", 200, 1, 2)
    # a request of 128 + 128: steps at positions 128 .. 254, their mean of position + 1 is 192
    steps = [decode_bytes("gpt2-small", p, 1, 2) for p in range(128, 255)]
    assert len(steps) == 127
    assert CAT.mean_decode_bytes("gpt2-small", 128, 128, 1, 2) == pytest.approx(
        sum(steps) / 127) == WEIGHTS_BF16 + 192 * KV_BF16
    assert CAT.mean_decode_bytes("gpt2-small", 128, 1, 1, 2) is None


def test_llama_reads_its_grouped_keys_only() -> None:
    # 16 layers x 8 key/value heads x 64, not the 32 query heads
    assert CAT.kv_bytes_per_position("llama-1b", 2) == 2 * 16 * 8 * 64 * 2 == 32_768
    assert CAT.weight_bytes("llama-1b", 2) == 1_235_814_400 * 2  # RoPE: no positions


def test_mbu_arithmetic_for_gpt2_small_on_an_h200() -> None:
    # 0.618 ms a token (issue 42): 254.4 MB / 0.618 ms = 0.412 TB/s, 8.6 % of 4.8 TB/s
    moved = WEIGHTS_BF16 + 192 * KV_BF16
    assert lmcost.decode_bytes("gpt2-small", 128, 128, 1, "bf16") == moved == 254_384_640
    assert 100 * moved / 0.618e-3 / 4.8e12 == pytest.approx(8.576, rel=1e-3)


def test_the_two_flops_conventions_of_gpt2_small_by_hand() -> None:
    embedding = 50257 * 768 + 1024 * 768
    assert CAT.flops_params("gpt2-small", "no-embedding") == N_GPT2 - embedding == 85_056_000
    attention = 12 * 12 * 768 * 1024
    assert CAT.training_flops_per_token("gpt2-small", 1024) == \
        6 * 123_653_376 + attention == 855_166_464
    assert CAT.training_flops_per_token("gpt2-small", 1024, "no-embedding") == \
        6 * 85_056_000 + attention == 623_582_208
    assert CAT.flops_per_token("gpt2-small", 1024, "inference", "no-embedding") == \
        pytest.approx(623_582_208 / 3)
    with pytest.raises(ValueError, match="unknown FLOPs convention 'palm'"):
        CAT.training_flops_per_token("gpt2-small", 1024, "palm")


def test_prefill_flops_of_gpt2_small_by_hand() -> None:
    # 128 positions x (2 x 85 056 000 + 4 x 12 x 768 x 128) + the LM head once (2 V d)
    per_token = 2 * 85_056_000 + 4 * 12 * 768 * 128
    head = 2 * 50257 * 768
    assert CAT.prefill_flops("gpt2-small", 128, 1) == 128 * per_token + head \
        == 22_455_510_528
    assert CAT.prefill_flops("gpt2-small", 128, 4) == 4 * (128 * per_token + head)
    assert CAT.prefill_flops("gpt2-small", 128, 1, "no-embedding") == 128 * per_token


GENERATE = """name = "gen"
[[matrix]]
frameworks = ["torch"]
models = ["gpt2-small"]
batch_sizes = [1]
devices = ["{device}"]
precision = "{precision}"
mode = "generate"
prompt_tokens = 128
new_tokens = 4
"""


def generate_campaign(campaigns: Any, db: sqlite_utils.Database, device: str,
                      precision: str, device_name: str, ttft_s: float, itl_s: float,
                      fields: dict[str, Any] | None = None) -> int:
    """A generate configuration of one run of 5 measured requests, each ``ttft_s`` then
    three inter-token latencies of ``itl_s`` (so TPOT is ``itl_s``)."""
    cid, ((_, job_id),) = campaigns.create(db, GENERATE.format(device=device,
                                                               precision=precision), "gen")
    e2e = ttft_s + 3 * itl_s
    run_id = campaigns.add_run(db, cid, job_id, [e2e] * 5, 4,
                               fields={"device_name": device_name, **(fields or {})})
    Store(db).add_generations(run_id, [
        {"idx": i, "warmup": 0, "ttft_s": ttft_s, "e2e_s": e2e, "prompt_tokens": 128,
         "new_tokens": 4, "batch": 1, "itl_s": pack_seconds([itl_s] * 3)} for i in range(5)])
    return cid


def test_mbu_and_prefill_tflops_of_a_stored_h200_run(campaigns: Any) -> None:
    db = memory_db()
    cid = generate_campaign(campaigns, db, "gpu:1", "bf16", "NVIDIA H200", 0.004, 0.0005)
    (res,) = config_results(db, cid)
    moved = WEIGHTS_BF16 + (128 + 4 / 2) * KV_BF16  # positions 128, 129, 130
    mbu = value_of(res, "mbu")
    assert mbu.value == pytest.approx(100 * moved / 0.0005 / 4.8e12)
    assert mbu.text(export.metric_spec("mbu")).startswith("10.5 (0.504 of 4.8 TB/s)")
    prefill = value_of(res, "prefill-tflops")
    assert prefill.value == pytest.approx(22_455_510_528 / 0.004 / 1e12)  # 5.61
    md = render(export.build_table(db, cid, "mbu"), "md")
    assert "model bandwidth utilisation" in md and "| 10.5 (0.504 of 4.8 TB/s) |" in md


def test_cpu_and_unknown_gpus_have_no_bandwidth_peak(campaigns: Any) -> None:
    db = memory_db()
    cpu = generate_campaign(campaigns, db, "cpu:1", "fp32", "AMD EPYC", 0.05, 0.01)
    (res,) = config_results(db, cpu)
    assert value_of(res, "mbu").reason == "n/a: no peak bandwidth for CPU"
    # a CPU prefill still has its TFLOP/s: FLOPs over time, no peak needed
    assert value_of(res, "prefill-tflops").value == pytest.approx(22_455_510_528 / 0.05 / 1e12)
    db2 = memory_db()
    h800 = generate_campaign(campaigns, db2, "gpu:1", "bf16", "NVIDIA H800", 0.004, 0.0005)
    (res2,) = config_results(db2, h800)
    assert value_of(res2, "mbu").reason == "n/a: unknown peak bandwidth"


def test_cpu_export_of_mbu_says_why(campaigns: Any, tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    db = connect(path)
    generate_campaign(campaigns, db, "cpu:1", "fp32", "AMD EPYC", 0.05, 0.01)
    db.close()
    env = {**os.environ, "DLTOP_DB": str(path)}
    res = subprocess.run([sys.executable, "-m", "dltop", "export", "--metric", "mbu",
                          "--format", "json"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    (row,) = doc["rows"]
    (cell,) = row["cells"].values()
    assert cell["value"] is None and cell["label"] == "n/a: no peak bandwidth for CPU"


def test_gpu_energy_shows_the_idle_power_beside_it(campaigns: Any) -> None:
    db = memory_db()
    cid = generate_campaign(campaigns, db, "gpu:1", "bf16", "NVIDIA H200", 0.004, 0.0005,
                            {"start_power_w": 126.7, "power_mean_w": 135.7,
                             "joules_per_sample": 0.103, "gpu_readings": 50, "window_s": 6.0})
    (res,) = config_results(db, cid)
    energy = value_of(res, "energy")
    assert energy.value == pytest.approx(0.103)
    assert energy.suffix == " (idle 127 W before, 136 W during)"
    assert dict(energy.extra)["idle_power_w"] == pytest.approx(126.7)


def test_mfu_by_either_convention_of_a_stored_training_run(campaigns: Any,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    db = connect(path)
    cid, ((_, job_id),) = campaigns.create(db, GENERATE.replace(
        'mode = "generate"\nprompt_tokens = 128\nnew_tokens = 4\n', "").format(
        device="gpu:1", precision="bf16"), "train")
    toks = 1024
    campaigns.add_run(db, cid, job_id, [0.25, 0.25], toks,
                      fields={"flops_per_sample": 855_166_464, "device_name": "NVIDIA H200"})
    (res,) = config_results(db, cid)
    tokens_per_s = toks / 0.25
    assert value_of(res, "mfu").value == pytest.approx(
        100 * tokens_per_s * 855_166_464 / 989.4e12)
    assert value_of(res, "mfu-no-embedding").value == pytest.approx(
        100 * tokens_per_s * 623_582_208 / 989.4e12)
    db.close()
    env = {**os.environ, "DLTOP_DB": str(path)}

    def export_md(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dltop", "export", *args],
                              capture_output=True, text=True, env=env, timeout=120)

    nano, titan = export_md("--metric", "mfu"), export_md("--metric", "mfu", "--flops",
                                                          "no-embedding")
    assert "FLOPs convention: nanoGPT's" in nano.stdout
    assert "FLOPs convention: no-embedding, torchtitan's" in titan.stdout
    assert "(torchtitan's convention)" in titan.stdout.splitlines()[0]
    bad = export_md("--metric", "time", "--flops", "no-embedding")
    assert bad.returncode == 2 and "--flops picks the FLOPs convention of --metric tflops " \
        "or mfu, not of --metric time" in bad.stderr


TRAIN = GENERATE.replace('mode = "generate"\nprompt_tokens = 128\nnew_tokens = 4\n', "")


def test_compare_mfu_by_either_convention(campaigns: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from dltop import cli

    path = tmp_path / "c.db"
    db = connect(path)
    for step_s in (0.25, 0.2):  # campaign 2 is 1.25 x faster
        cid, jobs = campaigns.create(db, TRAIN.format(device="gpu:1", precision="bf16")
                                     + "repeats = 2\n", "t")
        for _, job_id in jobs:
            campaigns.add_run(db, cid, job_id, [step_s * x for x in (1.0, 1.01, 0.99, 1.0)],
                              1024, fields={"flops_per_sample": 855_166_464,
                                            "device_name": "NVIDIA H200"})
    db.close()

    def rows(*extra: str) -> list[dict[str, Any]]:
        assert cli.main(["compare", "--db", str(path), "1", "2", "--metric", "mfu",
                         "--format", "json", *extra]) == 0
        return list(json.loads(capsys.readouterr().out)["rows"])

    (nano,), (titan,) = rows(), rows("--flops", "no-embedding")
    assert titan["a"] == pytest.approx(nano["a"] * 623_582_208 / 855_166_464)
    assert titan["ratio"] == pytest.approx(nano["ratio"]) == pytest.approx(1.25, rel=0.02)
    assert titan["verdict"] == nano["verdict"] == "higher MFU"
    assert cli.main(["compare", "--db", str(path), "1", "2", "--flops", "no-embedding"]) == 2
    assert "compare --flops picks the FLOPs convention of --metric mfu" in \
        capsys.readouterr().err
