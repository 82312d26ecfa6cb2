"""scripts/gpu_check.sh without a GPU: the plumbing mode, end to end, and its parts.

The real GPU run happens on a lent GPU machine (docs/gpu.md); here the script must run
whole with one simulated GPU and a CPU stand-in campaign, report the CUDA steps as
skipped with the reason, and leave at most 8 files (what the device tool returns).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

import gpu_check_report  # noqa: E402
import gpu_check_steps  # noqa: E402


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, "DLTOP_SITE": str(tmp_path / "site")}


def _section(report: str, title: str) -> str:
    body = report.split(f"\n## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0].strip()


@pytest.mark.slow
def test_no_gpu_mode_runs_whole_and_reports_skipped_cuda_steps(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = subprocess.run([str(SCRIPTS / "gpu_check.sh"), str(out), "--no-gpu",
                          "--budget-s", "400"], env=_env(tmp_path), capture_output=True,
                         text=True, timeout=500, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    files = {p.name for p in out.iterdir()}
    assert len(files) <= 8, files
    assert {"report.md", "steps.json", "telemetry.json", "devices.json", "campaign.json",
            "summary.json", "campaign.db"} <= files
    assert files & {"tui.txt", "tui.svg"}

    steps = {s["name"]: s for s in json.loads((out / "steps.json").read_text())["steps"]}
    for name in ("env", "doctor", "devices", "sampler", "profile", "llm", "campaign",
                 "export", "tui"):
        assert steps[name]["status"] == "ok", steps[name]
    for name in ("nvml", "harness", "harness-llm", "tensorflow"):
        assert steps[name]["status"] == "skipped"
        assert steps[name]["note"] == "no GPU: --no-gpu given"

    report = (out / "report.md").read_text()
    assert "mode: **no-gpu** (--no-gpu given)" in report
    for title in gpu_check_report.SECTIONS:
        assert f"\n## {title}\n" in report, title
    for title in ("NVML query latency", "Harness overhead on the GPU",
                  "TensorFlow on the GPU"):
        assert _section(report, title).startswith("skipped: no GPU: --no-gpu given"), title
    assert _section(report, "ResNet-50 training throughput").startswith("skipped: no GPU")
    assert "Simulated GPU 0" in _section(report, "Devices")
    assert "fcn-r" in _section(report, "Export summary")

    # The GPU profile itself was loaded by dltop (a runner option this dltop lacks dropped).
    profile = json.loads((out / "steps.json").read_text())["profile"]
    assert profile["jobs"] == 21
    assert set(profile["dropped_keys"]) <= set(gpu_check_steps.OPTIONAL_KEYS)

    runs = json.loads((out / "campaign.json").read_text())["runs"]
    # The transformer stand-in (gpt-tiny on cpu:1: a training run and a generate run),
    # then the CPU stand-in of the CNN campaign, into one database.
    train, gen, run = runs
    assert [r["model"] for r in runs] == ["gpt-tiny", "gpt-tiny", "fcn-r"]
    assert all(r["status"] == "ok" for r in runs), runs
    assert train["samples_per_s"] > 0 and train["settings"]["seq_len"] == 32
    assert gen["settings"]["mode"] == "generate" and gen["requests"] == 3
    assert gen["ttft_p50_s"] > 0 and gen["tpot_p50_s"] > 0
    transformers = _section(report, "Transformers")
    assert "| 2 | torch | gpt-tiny | generate | 1 | 8+4 | off | ok |" in transformers
    assert (run["model"], run["job_device"], run["status"]) == ("fcn-r", "cpu:1", "ok")
    # The simulated GPU's rows under the lone CPU run: counter and power agree.
    assert 0.8 < run["rows_ratio"] < 1.25, run
    sampler = json.loads((out / "telemetry.json").read_text())["sampler"]
    assert sampler["simulated"] and [r["rate_hz"] for r in sampler["rates"]] == [
        10.0, 25.0, 50.0, 100.0]
    assert json.loads((out / "devices.json").read_text())["simulated"] is True


@pytest.mark.slow
def test_tui_pilot_capture_without_tmux(tmp_path: Path) -> None:
    svg, result = tmp_path / "tui.svg", tmp_path / "r.json"
    subprocess.run([sys.executable, str(SCRIPTS / "gpu_check_steps.py"), "tui-pilot",
                    str(result), str(tmp_path / "none.db"), "1", str(svg)],
                   check=True, timeout=120, capture_output=True)
    text = svg.read_text()
    assert text.startswith("<svg") and "Simulated" in text
    assert json.loads(result.read_text())["bytes"] == len(text.encode())


def test_profile_dump_round_trips() -> None:
    with (SCRIPTS / "gpu_check_profile.toml").open("rb") as f:
        data = tomllib.load(f)
    assert tomllib.loads(gpu_check_steps.dump_profile(data)) == data


def test_the_check_profiles_run_once_and_the_builtin_gpu_profiles_thrice() -> None:
    from dltop.profiles.loader import load

    for name in ("gpu_check_profile.toml", "gpu_check_llm.toml"):
        with (SCRIPTS / name).open("rb") as f:
            assert tomllib.load(f)["defaults"]["repeats"] == 1, name
        assert {j.repeat for j in load(str(SCRIPTS / name)).jobs} == {0}, name
    for name in ("dlbench-gpu", "llm-gpu"):
        jobs = load(name).jobs
        assert {j.repeat for j in jobs} == {0, 1, 2}, name
        # every configuration three times: three times the distinct configurations
        assert len(jobs) == 3 * len({dataclasses.replace(j, repeat=0) for j in jobs}), name


def test_harness_rows_parsed_from_the_benchmark_output() -> None:
    out = ("device=gpu threads=1 iterations=20 warmup=5 rounds=2 (alternating bare/dltop)\n"
           "framework   model      batch  bare s/iter  dltop s/iter   ratio\n"
           "torch       resnet-50     64      0.05012       0.05031   1.004\n"
           "torch: worst ratio 1.004 (goal <= 1.01): met\n")
    assert gpu_check_report.parse_harness(out) == [
        {"framework": "torch", "model": "resnet-50", "batch": 64, "bare_s": 0.05012,
         "dltop_s": 0.05031, "ratio": 1.004}]


def _run(**kw: object) -> dict[str, object]:
    run: dict[str, object] = {
        "id": 1, "framework": "torch", "model": "resnet-50", "batch_size": 256,
        "job_device": "gpu:1", "precision": "fp16", "status": "ok", "median_s": 0.1,
        "samples_per_s": 2560.0, "mfu_pct": 31.5, "power_mean_w": 650.0, "energy_j": 2600.0,
        "energy_source": "counter", "energy_mean_power_j": 2613.0, "energy_ratio": 0.995,
        "joules_per_sample": 0.254, "gpu_mem_run_peak_bytes": 30 * 2**30,
        "gpu_mem_peak_bytes": None, "sm_clock_start_mhz": 1980.0, "sampler_achieved_hz": 10.0,
        "telemetry_simulated": 0, "rows_counter_j": 5000.0, "rows_integrated_j": 5050.0,
        "rows_ratio": 0.99, "settings": {"channels_last": True}, "error_message": None,
        "note": None}
    run.update(kw)
    return run


def test_gpu_mode_report_draws_every_figure() -> None:
    steps = [{"name": n, "status": "ok", "seconds": 1.0, "note": "", "error": ""}
             for n in ("env", "doctor", "devices", "nvml", "sampler", "profile", "llm",
                       "campaign", "export", "tui", "harness", "harness-llm", "tensorflow")]
    data = {
        "mode": "gpu", "mode_reason": "1 GPU(s) seen by NVML", "started_utc": "2026-11-24",
        "budget_s": 450.0, "seconds": 400.0, "steps": steps,
        "env": {"python": "3.12.3", "commit": "abc1234",
                "torch": {"torch": "2.11.0", "cuda": "13.0", "device": "NVIDIA H100 80GB HBM3"}},
        "doctor": "[ok] nvml: 1 GPU(s)\n",
        "devices": {"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                              "memory_total_bytes": 80 * 2**30, "power_limit_w": 700.0,
                              "driver_version": "580.159.04", "cuda_version": "13.0",
                              "simulated": False}]},
        "nvml": {"queries": [{"field": "utilization", "calls": 2000, "median_us": 12.5,
                              "p99_us": 40.0, "max_us": 90.0, "failures": 0}]},
        "sampler": {"gpus": 1, "simulated": False, "fastest_sustained_hz": 100.0,
                    "rates": [{"rate_hz": 10.0, "achieved_hz": 10.0, "missed_ticks": 0,
                               "cpu_pct_of_core": 0.4, "read_errors": 0}]},
        "campaign": {"runs": [_run(), _run(id=2, precision="fp32", batch_size=64,
                                           status="unsupported", samples_per_s=None,
                                           error_message="CUDA error"),
                              _run(id=3, model="gpt2-small", batch_size=16, precision="bf16",
                                   samples_per_s=395000.0, mfu_pct=34.1,
                                   settings={"compile": "default", "seq_len": 1024}),
                              _run(id=4, model="llama-1b", batch_size=8, precision="bf16",
                                   samples_per_s=64000.0, mfu_pct=38.0,
                                   settings={"compile": "default", "seq_len": 2048}),
                              _run(id=5, model="gpt2-small", batch_size=1, precision="bf16",
                                   samples_per_s=258.0, mfu_pct=None, ttft_p50_s=0.0037,
                                   tpot_p50_s=0.00386,
                                   settings={"mode": "generate", "prompt_tokens": 128,
                                             "new_tokens": 128})]},
        "decode": [{"case": "generate gpt2-small b1 compile=off cuda_graphs=False",
                    "ttft_ms": 3.4, "tpot_ms": 3.27, "bare_tpot_ms": 3.28,
                    "overhead": -0.004, "eager_token_agreement": 1.0}],
        "harness": {"rows": [{"framework": "torch", "model": "resnet-50", "batch": 64,
                              "bare_s": 0.05, "dltop_s": 0.0502, "ratio": 1.004}],
                    "output": ""},
        "tui": {"how": "Textual pilot (no tmux here)", "file": "tui.svg"},
        "export_md": "| model |\n|---|\n| resnet-50 |\n",
        "tensorflow": {"available": False, "reason": "No module named 'tensorflow'"},
    }
    text = gpu_check_report.render(data)
    assert "not drawn" not in text and "skipped" not in text
    throughput = _section(text, "ResNet-50 training throughput")
    assert "| torch | fp16 | 256 | True | 2.56e+03 | 31.5 | 0.918 | 1.04 |" in throughput
    assert "goal ≤ 1.01: met" in _section(text, "Harness overhead on the GPU")
    assert "| utilization | 2000 | 12.5 | 40 | 90 | 0 |" in _section(text, "NVML query latency")
    assert "CUDA error" in _section(text, "Campaign")
    # one repeat, said where the figures are (docs/metrics.md, statistics policy)
    assert _section(text, "Campaign").startswith("One repeat per configuration")
    assert "One repeat per configuration" in _section(text, "Transformers")
    assert _section(text, "TensorFlow on the GPU").startswith(
        "not available on this machine: No module named")
    llm = _section(text, "Transformers")
    assert "- gpt2-small bf16 compile=default: MFU 34.1 % (goal ≥ 30 %: met)" in llm
    assert "- llama-1b bf16 compile=default: MFU 38 % (goal ≥ 40 %: NOT met)" in llm
    assert "| 5 | torch | gpt2-small | generate | 1 | 128+128 | off | ok |" in llm
    assert "| 3.7 | 3.86 |" in llm  # TTFT and TPOT in ms
    assert "| generate gpt2-small b1 compile=off cuda_graphs=False | 3.4 | 3.27 | 3.28 | -0.4 |" \
        in llm
