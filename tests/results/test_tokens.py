"""Transformer rows count tokens: MFU from FLOPs per token, units in titles, headers and
per row where a table mixes transformers and other models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from dltop.profiles import lm
from dltop.results import export, summary, tokens
from dltop.results.aggregate import config_results
from dltop.results.metrics import value_of
from dltop.results.peaks import gpu_peak
from dltop.results.render import render
from dltop.store import connect, memory_db

H100 = "NVIDIA H100 80GB HBM3"
BATCH, SEQ = 8, 1024


def lm_profile(models: str = '["gpt2-small"]', devices: str = '["gpu:1"]',
               precision: str = "bf16") -> str:
    return (f'name = "lm"\n[[matrix]]\nframeworks = ["torch"]\nmodels = {models}\n'
            f'batch_sizes = [{BATCH}]\ndevices = {devices}\nprecision = "{precision}"\n')


def test_parameter_counts_by_hand() -> None:
    # GPT-2: token + positions + L x (12 d^2 + 13 d) + final LayerNorm (docs/models.md)
    assert lm.param_count("gpt2-small") == 50257 * 768 + 1024 * 768 + 12 * 7_087_872 + 1536 \
        == 124_439_808
    assert lm.param_count("gpt2-medium") == 354_823_168
    # Llama 3.2 1B: tied embedding + 16 x (q, o: d^2; k, v: d x 8 heads x 64; SwiGLU 3 d f;
    # two RMSNorm weights) + the final RMSNorm
    d, f, kv = 2048, 8192, 8 * 64
    block = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
    assert lm.param_count("llama-1b") == 128256 * d + 16 * block + d == 1_235_814_400


def test_gpt2_small_flops_per_token_by_hand() -> None:
    # 6 N + 12 L d T, N all parameters but the 1024 x 768 learned positions
    n = 124_439_808 - 1024 * 768
    assert lm.flops_per_token("gpt2-small", SEQ, "train") == 6 * n + 12 * 12 * 768 * SEQ
    assert lm.flops_per_token("gpt2-small", SEQ, "generate") is None


def test_mfu_of_a_stored_transformer_run_is_tokens_per_s_times_flops_per_token(
        campaigns: Any) -> None:
    db = memory_db()
    cid, jobs = campaigns.create(db, lm_profile(), "lm")
    (job, job_id), = jobs
    assert (job.seq_len, job.optimizer) == (SEQ, "adamw")
    per_token = lm.flops_per_token("gpt2-small", SEQ, "train")
    assert per_token is not None
    # what the runner sends: samples = tokens per iteration, the model event per token
    toks = job.samples_per_iter * SEQ
    campaigns.add_run(db, cid, job_id, [(0.5, toks, 1), (0.25, toks, 0), (0.25, toks, 0)],
                      toks, fields={"flops_per_sample": per_token, "device_name": H100,
                                    "param_count": lm.param_count("gpt2-small")})
    (res,) = config_results(db, cid)
    tokens_per_s = 2 * toks / 0.5
    assert value_of(res, "throughput").value == pytest.approx(tokens_per_s)
    assert value_of(res, "tflops").value == pytest.approx(tokens_per_s * per_token / 1e12)
    peak = gpu_peak(H100)
    assert peak is not None
    mfu = 100 * tokens_per_s * per_token / (peak.tflops["bf16"] * 1e12)
    assert value_of(res, "mfu").value == pytest.approx(mfu)
    # 32 768 tokens/s x 8.55e8 FLOPs/token = 28.0 TFLOP/s of the H100 SXM's 989.4 bf16
    assert mfu == pytest.approx(2.832, rel=1e-3)

    table = export.build_table(db, cid, "throughput")
    text = render(table, "md")
    assert "tokens per second" in table.title and "samples" not in table.title
    assert [c.unit for c in table.columns if c.key == "gpu:1"] == ["tokens/s"]
    assert "unit" not in [c.key for c in table.columns]
    # the caption states the update rule and the sequence length
    assert "optimizer adamw" in text and "seq len 1024" in text and "attention fused" in text
    assert "a sample is a token" in text
    energy = export.build_table(db, cid, "energy")
    assert "J per token" in energy.title
    tflops = export.build_table(db, cid, "tflops")
    assert "FLOPs per token" in tflops.title
    heads = [c.header for c in summary.summary_table(db, cid).columns]
    assert "tokens/s" in heads and "J/token" in heads and "samples/s" not in heads


def _mixed(campaigns: Any, db: sqlite_utils.Database) -> int:
    cid, jobs = campaigns.create(db, lm_profile('["fcn-r", "gpt-tiny"]', '["cpu:1"]', "fp32"))
    for job, job_id in jobs:
        n = BATCH * job.seq_len if job.seq_len else BATCH
        campaigns.add_run(db, cid, job_id, [0.1, 0.1], n)
    return cid


def test_a_mixed_table_labels_each_rows_unit(campaigns: Any) -> None:
    db = memory_db()
    cid = _mixed(campaigns, db)
    table = export.build_table(db, cid, "throughput")
    keys = [c.key for c in table.columns]
    unit_at = keys.index(tokens.UNIT_COLUMN)
    units = {row.cells[0].text: row.cells[unit_at].text for row in table.rows
             if row.cells[0] is not None and row.cells[unit_at] is not None}
    assert units == {"fcn-r": "samples/s", "gpt-tiny": "tokens/s"}
    assert "tokens per second on the transformer rows" in table.title
    csv = render(table, "csv")
    assert "tokens/s" in csv and "samples/s" in csv
    # a metric without a sample in its unit needs no label
    assert tokens.UNIT_COLUMN not in [c.key for c in export.build_table(db, cid, "time").columns]
    summ = summary.summary_table(db, cid)
    keys = [c.key for c in summ.columns]
    at = keys.index(tokens.UNIT_COLUMN)
    assert sorted(str(r.cells[at].text) for r in summ.rows if r.cells[at] is not None) == [
        "samples", "tokens"]
    assert "samples|tokens/s" in [c.header for c in summ.columns]


def test_dltop_runs_says_tokens(campaigns: Any, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from dltop.cli import main

    mixed, only = tmp_path / "mixed.db", tmp_path / "lm.db"
    mdb = connect(mixed)
    _mixed(campaigns, mdb)
    mdb.close()
    db = connect(only)
    cid, ((_, job_id),) = campaigns.create(db, lm_profile('["gpt-tiny"]', '["cpu:1"]',
                                                            "fp32"))
    campaigns.add_run(db, cid, job_id, [0.1, 0.1], BATCH * 128)
    db.close()
    assert main(["runs", "--db", str(only)]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "samples/s" not in out
    assert main(["runs", "--db", str(mixed)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 4 significant digits, thousands grouped (docs/exports.md)
    assert any("gpt-tiny" in line and "10 240 tokens" in line for line in lines), lines
    assert any("fcn-r" in line and "80.0 samples" in line for line in lines), lines


def test_scaling_and_compare_say_tokens(campaigns: Any) -> None:
    from dltop.results import compare, comparetable, queries, scaling

    db = memory_db()
    a, b = _mixed(campaigns, db), _mixed(campaigns, db)
    table = scaling.campaigns_scaling_table(db, [queries.resolve_campaign(db, a)])
    keys = [c.key for c in table.columns]
    assert table.columns[keys.index("samples_per_s")].header == "samples|tokens/s"
    at = keys.index(tokens.UNIT_COLUMN)
    assert sorted(str(r.cells[at].text) for r in table.rows if r.cells[at] is not None) == [
        "samples/s", "tokens/s"]
    rows = compare.compare(db, [a], [b], "throughput", 0.05)
    cmp = comparetable.compare_table(rows, queries.resolve_campaign(db, a),
                                queries.resolve_campaign(db, b), "throughput", 0.05)
    keys = [c.key for c in cmp.columns]
    at = keys.index(tokens.UNIT_COLUMN)
    assert {(str(r.cells[0].text), str(r.cells[at].text)) for r in cmp.rows
            if r.cells[0] is not None and r.cells[at] is not None} == {
        ("fcn-r", "samples/s"), ("gpt-tiny", "tokens/s")}
