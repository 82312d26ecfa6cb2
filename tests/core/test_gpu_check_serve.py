"""scripts/gpu_check.py's ``serve`` step (issue 41 on a GPU, docs/gpu.md): its GPU
profile as dltop loads it, its figures from export rows, and, without a GPU, the whole
step: random models saved, ``transformers serve`` started by dltop beside its own
``generate`` runs, the report's section with the measured numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

import gpu_check  # noqa: E402
import gpu_check_report  # noqa: E402
import gpu_check_serve  # noqa: E402


def _section(report: str, title: str) -> str:
    body = report.split(f"\n## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0].strip()


def test_serve_is_a_step_off_the_default_list() -> None:
    assert "serve" in gpu_check.STEP_NAMES
    assert "serve" not in gpu_check.DEFAULT_STEPS
    assert set(gpu_check.DEFAULT_STEPS) == set(gpu_check.STEP_NAMES) - {"serve"}


def test_gpu_profile_loads_with_one_server_per_model(tmp_path: Path) -> None:
    from dltop.profiles.loader import load

    text, folders = gpu_check_serve.profile_text(gpu_check_serve.PROFILE.read_text(),
                                                 tmp_path, "/usr/bin/python3")
    assert set(folders) == {"gpt2-small", "llama-1b"}
    assert not [line for line in text.splitlines() if "@" in line and line[0] != "#"]
    for name in folders:  # the step writes them before dltop reads the profile
        (tmp_path / f"prompts-{name}.jsonl").write_text(
            gpu_check_serve.prompts(1000, 4, 128))
    prof = tmp_path / "serve.toml"
    prof.write_text(text)
    jobs = load(str(prof)).jobs
    gen = [j for j in jobs if j.mode == "generate"]
    serve = [j for j in jobs if j.mode == "serve"]
    assert sorted(j.model for j in gen) == ["gpt2-small", "llama-1b"]
    assert {(j.precision, j.device.label, j.batch_size) for j in gen} == {("bf16", "gpu:1", 1)}
    # the same prompt and new tokens on both sides
    assert {(j.prompt_tokens, j.new_tokens) for j in jobs} == {(128, 64)}
    by_model: dict[str, list[tuple[int | None, object]]] = {}
    for j in serve:
        by_model.setdefault(Path(j.model).name, []).append((j.concurrency, j.request_rate))
    for name, runs in by_model.items():
        assert runs[0][0] == 1, (name, runs)  # concurrency 1 beside generate
        assert sorted(r for c, r in runs if c == 8) == [1.0, 2.0, 4.0, 8.0]
    # consecutive per model: one server (one cold start) per model in the group scope
    models = [Path(j.model).name for j in serve]
    assert models == sorted(models, key=models.index) and len(set(models)) == 2
    assert all(str(folders[Path(j.model).name]) == j.model for j in serve)
    # each serve entry says the shape it serves and the server's dtype: dltop's overhead
    # table pairs it with the generate runs of that shape, precision not stated as differing
    assert all(j.shape == Path(j.model).name and j.precision == "bf16" for j in serve)


def test_prompts_are_exactly_the_asked_words_of_the_model_vocabulary() -> None:
    lines = gpu_check_serve.prompts(50, 6, 16, seed=1).splitlines()
    assert len(lines) == 6
    for line in lines:
        words = json.loads(line).split()
        assert len(words) == 16
        assert all(w.startswith("w") and 0 <= int(w[1:]) < 48 for w in words)


def _row(model: str, mode: str, tpot: float | None, ttft: float, **kw: object) -> dict:
    row: dict[str, object] = {"model": model, "mode": mode, "status": "ok", "tpot": tpot,
                              "ttft": ttft, "concurrency": "-", "request_rate": "-"}
    row.update(kw)
    return row


def test_rates_state_j_per_token_against_rate_by_the_shape_served() -> None:
    folder = "/w/models/gpt2-small"
    small, llama = {"shape": "gpt2-small"}, {"shape": "llama-1b"}
    rows = [
        _row("gpt2-small", "generate", 0.004, 0.005),
        _row(folder, "serve", 0.015, 0.040, concurrency=8, request_rate=2.0, power=300.0,
             identity=small, **{"j-per-token": 0.5, "req-rate": 1.9, "output-rate": 120.0,
                                "detail": {"power": {"idle_power_w": 120.0},
                                           "j-per-token": {"net_j": 0.3}}}),
        _row(folder, "serve", 0.010, 0.030, concurrency=1, request_rate="inf", identity=small),
        _row(folder, "serve", 0.011, 0.030, concurrency=8, request_rate=1.0, identity=small),
        _row("/w/models/llama-1b", "serve", 0.02, 0.05, concurrency=1, request_rate="inf",
             identity=llama),
    ]
    got = gpu_check_serve.rates(rows)
    order = [(r["model"], r["concurrency"], r["request_rate"]) for r in got]
    assert order == [("gpt2-small", 1, "inf"), ("gpt2-small", 8, 1.0),
                     ("gpt2-small", 8, 2.0), ("llama-1b", 1, "inf")]
    two = got[2]
    assert (two["j_per_token"], two["j_per_token_net"], two["idle_w"]) == (0.5, 0.3, 120.0)
    text = "\n".join(gpu_check_serve.render({"serve": {"models": [], "rates": got}}))
    assert "| gpt2-small | 8 | 2 | 1.9 | 120 | 40 | 15 | 300 | 120 | 0.5 | 0.3 | ok |" \
        in text


def test_overhead_is_dltops_table_read_back() -> None:
    """The step's overhead figures are the rows of ``dltop export --table overhead``
    (JSON), in ms; the report's section shows that table's Markdown as dltop drew it."""
    row = {"shape": "gpt2-small", "served": "/w/models/gpt2-small",
           "pairing": "concurrency 1 = batch 1", "identity": {"request_rate": "inf"},
           "tpot_generate": 0.004, "tpot_serve": 0.010, "tpot_ratio": 2.5, "tpot_diff": 0.006,
           "ttft_generate": 0.005, "ttft_serve": 0.030, "differs": []}
    (o,) = gpu_check_serve.overhead([row])
    assert o["model"] == "gpt2-small" and o["ratio"] == pytest.approx(2.5)
    assert o["diff_ms"] == pytest.approx(6.0) and o["tpot_serve_ms"] == pytest.approx(10.0)
    assert (o["request_rate"], o["differs"]) == ("inf", "")
    md = "| shape | served model |\n|---|---|\n| gpt2-small | /w/models/gpt2-small |\n"
    text = "\n".join(gpu_check_serve.render({"serve": {
        "models": [], "overhead": [o], "overhead_md": md,
        "overhead_command": "export --campaign c --table overhead"}}))
    assert "`dltop export --campaign c --table overhead`" in text
    assert "| gpt2-small | /w/models/gpt2-small |" in text


@pytest.mark.slow
def test_no_gpu_serve_step_runs_transformers_serve_beside_generate(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "DLTOP_SITE": str(tmp_path / "site"),
           "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([str(SCRIPTS / "gpu_check.sh"), str(out), "--no-gpu",
                          "--steps", "serve"], env=env, capture_output=True, text=True,
                         timeout=400, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads((out / "steps.json").read_text())
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["serve"]["status"] == "ok", steps["serve"]
    assert steps["serve"]["note"].startswith("gpt-tiny: serve/generate TPOT ")
    sv = data["serve"]
    assert [m["model"] for m in sv["models"]] == ["gpt-tiny"]
    (o,) = sv["overhead"]
    assert o["tpot_generate_ms"] > 0 and o["tpot_serve_ms"] > 0
    assert o["ratio"] == pytest.approx(o["tpot_serve_ms"] / o["tpot_generate_ms"])
    rates = [(r["concurrency"], r["request_rate"], r["status"]) for r in sv["rates"]]
    assert rates == [(1, "inf", "ok"), (4, 2.0, "ok"), (4, 4.0, "ok")]
    assert all(r["achieved_req_s"] > 0 and r["why"] == "n/a: no GPU" for r in sv["rates"])
    report = (out / "report.md").read_text()
    section = _section(report, gpu_check_report.SECTIONS[-1])
    # dltop's own overhead table, as `dltop export --table overhead` draws it
    assert "| gpt-tiny | " in section and "| concurrency 1 = batch 1 |" in section
    assert sv["overhead_command"] == "export --campaign gpu-check-serve-cpu --table overhead"
    assert o["pairing"] == "concurrency 1 = batch 1", o
    assert "campaign 1 finished: 4 ok" in section
    assert "Campaign 1 `gpu-check-serve-cpu` (finished" in section
    assert (out / "campaign.db").exists()
