"""report.md of scripts/gpu_check.py: every figure of the check, or why it is missing.

Every section is always there; one whose step did not run says ``skipped: REASON``,
``failed: ERROR`` or ``timeout: ...`` in its first line, so the report of a partial
check still says what is missing and why.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import gpu_check_serve

REFERENCES = (
    ("Lambda, PyTorch ResNet-50 training, H100 SXM, fp16", 2790.0, "fp16"),
    ("NVIDIA DeepLearningExamples ResNet-50 v1.5, A100 80GB, AMP", 2470.0, "fp16"),
)
"""Public ResNet-50 training throughputs (images/s, one GPU) the measured one stands beside."""
SECTIONS = ("Steps", "Doctor", "Devices", "NVML query latency", "Sampler rate and CPU cost",
            "Campaign", "ResNet-50 training throughput", "Harness overhead on the GPU",
            "TUI", "Export summary", "TensorFlow on the GPU", "Transformers",
            "Serving: transformers serve beside generate")
LLM_MODELS = ("gpt-tiny", "gpt2-small", "gpt2-medium", "llama-1b")
LLM_REFERENCES = (
    ("bare Hugging Face GPT-2 small, torch.compile, bf16, batch 16 x 1024, H200 "
     "(shared/gpu/2026-11-26-h200/anchor_gpt2_nvml.py)", 331891.0, 28.9),
    ("same, eager", 146043.0, 12.7),
    ("nanoGPT README: GPT-2 124M, torch.compile, batch 12 x 1024, 135 ms/iter on an A100 "
     "(25 % of its 312 TFLOP/s by this FLOPs formula)", 91022.0, 25.0),
)
"""GPT-2 small training figures (tokens/s, MFU %) the measured ones stand beside."""
LLM_TARGETS = {("gpt2-small", "default"): 30.0, ("llama-1b", "default"): 40.0}
"""Issue 29's MFU goals (bf16, compile) per (model, compile mode)."""
REPEATS_NOTE = (
    "One repeat per configuration (`repeats = 1` in the check's profiles, to fit its "
    "budget): every figure below is a single run's, with no interval across repeats; a "
    "single run's spread is within-run only. The built-in GPU profiles (dlbench-gpu, "
    "llm-gpu) repeat 3 times (docs/metrics.md, statistics policy).")
"""Said at the top of the campaign and transformer sections: the check runs each
configuration once."""


def parse_harness(text: str) -> list[dict[str, Any]]:
    """The rows ``framework model batch bare dltop ratio`` of harness_overhead.py's output."""
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        ci = re.search(r"95% CI of the ratio \[([\d.]+), ([\d.]+)\] .*over (\d+) rounds", line)
        if ci and rows:
            rows[-1].update(ci_low=float(ci[1]), ci_high=float(ci[2]), rounds=int(ci[3]))
            continue
        parts = line.split()
        if len(parts) != 6 or not parts[2].isdigit():
            continue
        try:
            bare, harness, ratio = (float(x) for x in parts[3:])
        except ValueError:
            continue
        rows.append({"framework": parts[0], "model": parts[1], "batch": int(parts[2]),
                     "bare_s": bare, "dltop_s": harness, "ratio": ratio})
    return rows


def _f(v: Any, fmt: str = "{:.3g}") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return fmt.format(v)
    return str(v)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return out


def _status(data: dict[str, Any], name: str) -> list[str]:
    """``skipped: ...`` / ``failed: ...`` (and the error's tail) for a step that did not
    end ok; nothing for one that did."""
    for s in data.get("steps", []):
        if s["name"] == name and s["status"] != "ok":
            lines = [f"{s['status']}: {s['note']}".replace("\n", " ")]
            if s["error"] and "\n" in s["error"].strip():  # one line: the note has it
                lines += ["", "```", "\n".join(s["error"].splitlines()[-25:]), "```"]
            return [*lines, ""]
    if not any(s["name"] == name for s in data.get("steps", [])):
        return ["not run: the check stopped before this step", ""]
    return []


def _mib(v: Any) -> float | None:
    return v / 2**20 if isinstance(v, int | float) else None


def render(data: dict[str, Any]) -> str:
    env = data.get("env", {})
    torch = env.get("torch", {})
    gpu = data["mode"] == "gpu"
    out = ["# dltop GPU check", "",
           f"- mode: **{data['mode']}** ({data['mode_reason']})"
           + ("" if gpu else " — plumbing only: simulated GPU, CPU stand-in campaign"),
           f"- started {data['started_utc']} UTC, {data.get('seconds', 0):.0f} s of a "
           f"{data['budget_s']:.0f} s budget",
           f"- device: {torch.get('device') or 'none'}; torch {torch.get('torch')} "
           f"(CUDA {torch.get('cuda')}); Python {env.get('python')}; dltop commit "
           f"{env.get('commit')}", ""]
    if env.get("nvidia_smi"):
        out += ["```", env["nvidia_smi"], "```", ""]
    out += ["## Steps", ""]
    out += _table(["step", "status", "s", "note"],
                  [[s["name"], s["status"], s["seconds"], s["note"].replace("|", "/")]
                   for s in data.get("steps", [])])
    for title, fn, step in ((SECTIONS[1], _doctor, "doctor"), (SECTIONS[2], _devices, "devices"),
                            (SECTIONS[3], _nvml, "nvml"), (SECTIONS[4], _sampler, "sampler"),
                            (SECTIONS[5], _campaign, "campaign"),
                            (SECTIONS[6], _throughput, "campaign"),
                            (SECTIONS[7], _harness, "harness"), (SECTIONS[8], _tui, "tui"),
                            (SECTIONS[9], _export, "export"),
                            (SECTIONS[10], _tensorflow, "tensorflow"),
                            (SECTIONS[11], _llm, "llm"),
                            (SECTIONS[12], gpu_check_serve.render, "serve")):
        out += ["", f"## {title}", ""]
        out += _status(data, step)
        try:
            out += fn(data)
        except Exception as exc:  # a report must come out whatever a step left behind
            out.append(f"(section not drawn: {type(exc).__name__}: {exc})")
    return "\n".join(out) + "\n"


def _doctor(d: dict[str, Any]) -> list[str]:
    return ["```", d["doctor"].rstrip(), "```"] if "doctor" in d else []


def _devices(d: dict[str, Any]) -> list[str]:
    dev = d.get("devices")
    if not dev:
        return []
    gpus = dev.get("gpus") or []
    rows = [[g.get("index"), g.get("name"), _mib(g.get("memory_total_bytes")),
             g.get("power_limit_w"), g.get("driver_version"), g.get("cuda_version"),
             g.get("simulated")] for g in gpus if isinstance(g, dict)]
    if not rows:
        return [f"No GPU: {dev.get('gpu_unavailable_reason') or 'NVML lists none'}. "
                "Raw: devices.json."]
    return ["Raw: devices.json.", "",
            *_table(["GPU", "name", "memory MiB", "power limit W", "driver", "CUDA",
                     "simulated"], rows)]


def _nvml(d: dict[str, Any]) -> list[str]:
    nv = d.get("nvml") or {}
    if "queries" not in nv:
        return []
    rows = [[q["field"], q["calls"], q["median_us"], q["p99_us"], q["max_us"], q["failures"]]
            for q in nv["queries"]]
    return ["Each query the sampler makes of GPU 0, timed over repeated calls (fast and slow "
            "ticks alternating); `tick fast`/`tick slow`: one whole reading of the GPU.", "",
            *_table(["query", "calls", "median µs", "p99 µs", "max µs", "failures"], rows)]


def _sampler(d: dict[str, Any]) -> list[str]:
    s = d.get("sampler")
    if not s:
        return []
    rows = [[r["rate_hz"], r["achieved_hz"], r["missed_ticks"], r["cpu_pct_of_core"],
             r["read_errors"]] for r in s["rates"]]
    kind = "simulated" if s["simulated"] else "real"
    return [f"The sampler thread over {s['gpus']} {kind} GPU(s), host at 2 Hz, windows "
            f"written to SQLite; CPU: the process's CPU time per wall second. Fastest rate "
            f"sustained (≥ 95 % achieved): **{s['fastest_sustained_hz']} Hz**.", "",
            *_table(["asked Hz", "achieved Hz", "missed ticks", "CPU % of a core",
                     "read errors"], rows)]


def _runs(d: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = (d.get("campaign") or {}).get("runs", [])
    return runs


def _campaign(d: dict[str, Any]) -> list[str]:
    from dltop.telemetry.readings import MIN_GPU_READINGS, MIN_WINDOW_S

    runs = _runs(d)
    if not runs:
        return []
    perf, energy = [], []
    for r in runs:
        opts = ",".join(f"{k}={v}" for k, v in r.get("settings", {}).items()) or "–"
        why = (r.get("error_message") or r.get("note") or "").replace("\n", " ")[:160]
        perf.append([r["id"], r["framework"], r["model"], r["batch_size"], r["job_device"],
                     r["precision"], opts, r["status"], r["median_s"], r["samples_per_s"],
                     r["mfu_pct"], _mib(r["gpu_mem_run_peak_bytes"] or r["gpu_mem_peak_bytes"]),
                     r["sm_clock_start_mhz"], why.replace("|", "/")])
        energy.append([r["id"], r["model"], r["precision"], r["power_mean_w"], r["energy_j"],
                       r["energy_source"], r["energy_mean_power_j"], r["energy_ratio"],
                       r["joules_per_sample"], r.get("window_s"), r.get("gpu_readings"),
                       r.get("rows_counter_j"), r.get("rows_integrated_j"), r.get("rows_ratio"),
                       r["sampler_achieved_hz"], bool(r["telemetry_simulated"])])
    unsat = (d.get("campaign") or {}).get("unsatisfiable") or []
    lines = [REPEATS_NOTE, "",
             "MFU: TFLOP/s ÷ dltop's peak table for the device and precision; GPU MiB: the "
             "run's processes' peak (else the device's). Raw: campaign.json, campaign.db.", "",
             *_table(["run", "fw", "model", "batch", "device", "precision", "settings",
                      "status", "s/iter", "samples/s", "MFU %", "GPU MiB", "SM MHz",
                      "note"], perf),
             "", "Energy. Measured window: `energy J` from the NVML energy counter (source "
             "`counter`; `integrated`: power readings integrated) against mean power × "
             "window; stored rows (0.5 s windows, spawn to exit): the counter's rise against "
             "the trapezoid of the windows' mean power. Ratios near 1 say the counter and "
             "the power readings agree. GPU readings: the sampler's readings of the run's GPU "
             "inside the measured window (dltop's tables show no figure from fewer than "
             f"{MIN_GPU_READINGS}, or from a window under {MIN_WINDOW_S:g} s).", "",
             *_table(["run", "model", "precision", "power W", "energy J", "source",
                      "mean P×t J", "ratio", "J/sample", "window s", "GPU readings",
                      "rows counter J", "rows ∫P dt J",
                      "rows ratio", "sampler Hz", "simulated"], energy)]
    if unsat:
        lines += ["", f"{len(unsat)} job(s) unsatisfiable on this host."]
    if d["mode"] != "gpu":
        lines += ["", "CPU stand-in campaign (no GPU); the GPU profile was only loaded."]
    return lines


def _throughput(d: dict[str, Any]) -> list[str]:
    if d["mode"] != "gpu":
        return [f"skipped: no GPU ({d['mode_reason']}); the references: "
                + "; ".join(f"{n} ≈ {v:g} img/s" for n, v, _ in REFERENCES)]
    runs = [r for r in _runs(d) if r["model"] == "resnet-50"
            and r["precision"] in ("bf16", "fp16") and r["status"] == "ok"]
    if not runs:
        return ["No ResNet-50 bf16/fp16 run ended ok (the campaign table says why); the "
                "references: " + "; ".join(f"{n} ≈ {v:g} img/s" for n, v, _ in REFERENCES)]
    rows = [[r["framework"], r["precision"], r["batch_size"],
             r.get("settings", {}).get("channels_last", "– (option absent)"),
             r["samples_per_s"], r["mfu_pct"],
             *(r["samples_per_s"] / v if r["samples_per_s"] else None
               for _, v, _ in REFERENCES)] for r in runs]
    return ["Training images/s of ResNet-50 (224×224, synthetic data) next to public "
            "references (different software, clocks and data pipelines: a sanity check, "
            "not a ranking).", "",
            *_table(["framework", "precision", "batch", "channels_last", "images/s", "MFU %",
                     *(f"÷ {n} ({v:g})" for n, v, _ in REFERENCES)], rows)]


def _harness(d: dict[str, Any]) -> list[str]:
    h = d.get("harness")
    if not h or not h["rows"]:
        return ["```", h["output"], "```"] if h and h.get("output") else []
    rows = [[r["framework"], r["model"], r["batch"], r["bare_s"], r["dltop_s"], r["ratio"],
             f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if "ci_low" in r else "",
             r.get("rounds", "")] for r in h["rows"]]
    worst = max((r["ratio"] for r in h["rows"]), default=None)
    met = "met" if worst is not None and worst <= 1.01 else "NOT met"
    return ["dltop's runner against a bare CUDA-synchronised loop, same model, batch and "
            "settings, alternating rounds; ratio of medians (goal ≤ 1.01: " + met + ").", "",
            *_table(["framework", "model", "batch", "bare s/iter", "dltop s/iter", "ratio",
                     "95% CI", "rounds"], rows)]


def _tui(d: dict[str, Any]) -> list[str]:
    t = d.get("tui")
    if not t:
        return []
    if "text" in t:
        return [f"{t['how']} ({t['file']}):", "", "```", t["text"].rstrip(), "```"]
    return [f"{t['how']}: {t['file']}"]


def _export(d: dict[str, Any]) -> list[str]:
    return [d["export_md"].rstrip()] if "export_md" in d else []


def _tensorflow(d: dict[str, Any]) -> list[str]:
    tf = d.get("tensorflow")
    if not tf:
        return []
    if not tf["available"]:
        return [f"not available on this machine: {tf['reason']}"]
    return [f"TensorFlow {tf['version']} under {tf['python']} sees {tf['gpus']} GPU(s); its "
            "runs are in the campaign table above.", "", "```", tf.get("campaign_log", ""),
            "```"]


def _ms(v: Any) -> float | None:
    return v * 1e3 if isinstance(v, int | float) else None


def _llm(d: dict[str, Any]) -> list[str]:
    runs = [r for r in _runs(d) if r["model"] in LLM_MODELS]
    if not runs:
        return []
    rows, verdicts = [], []
    for r in runs:
        st = r.get("settings", {})
        comp = st.get("compile", "off")
        mode = st.get("mode", "train")
        shape = (f"{st.get('prompt_tokens')}+{st.get('new_tokens')}" if mode == "generate"
                 else str(st.get("seq_len")))
        why = (r.get("error_message") or r.get("note") or "").replace("\n", " ")[:120]
        rows.append([r["id"], r["framework"], r["model"], mode, r["batch_size"], shape, comp,
                     r["status"], r["median_s"], r["samples_per_s"], r["mfu_pct"],
                     _ms(r.get("ttft_p50_s")), _ms(r.get("tpot_p50_s")),
                     _mib(r["gpu_mem_run_peak_bytes"] or r["gpu_mem_peak_bytes"]),
                     why.replace("|", "/")])
        goal = LLM_TARGETS.get((r["model"], comp)) if r["framework"] == "torch" else None
        if goal is not None and mode == "train" and r["status"] == "ok":
            got = r["mfu_pct"]
            verdicts.append(f"- {r['model']} bf16 compile={comp}: MFU {_f(got)} % (goal ≥ "
                            f"{goal:g} %: {'met' if got and got >= goal else 'NOT met'})")
    refs = [f"- {name}: {tok:,.0f} tokens/s, MFU {mfu:g} %" for name, tok, mfu in
            LLM_REFERENCES]
    return [REPEATS_NOTE, "",
            "Training: tokens/s (batch x seq_len per step) and MFU (6N + 12·L·d·T FLOPs "
            "per token ÷ the device's dense bf16 peak; docs/metrics.md). Generation: TTFT "
            "and time per output token, p50 over the measured requests.", "",
            *_table(["run", "fw", "model", "mode", "batch", "seq / prompt+new", "compile",
                     "status", "s/iter", "tokens/s", "MFU %", "TTFT ms", "TPOT ms",
                     "GPU MiB", "note"], rows),
            "", *verdicts, "", "References (GPT-2 small training):", *refs, *_decode(d)]


def _decode(d: dict[str, Any]) -> list[str]:
    cases = d.get("decode") or []
    if not cases:
        return []
    rows = [[c.get("case"), c.get("ttft_ms"), c.get("tpot_ms"), c.get("bare_tpot_ms"),
             None if c.get("overhead") is None else 100 * c["overhead"],
             c.get("eager_token_agreement"), c.get("error", "")[:100]] for c in cases]
    return ["", "Decode loop overhead (benchmarks/torch_lm_gpu.py): dltop's timing "
            "(lm_loop) against a bare loop of the same decode calls; each request's mean "
            "time per output token, the median request; goal ≤ 2 %.", "",
            *_table(["case", "TTFT ms", "TPOT ms", "bare TPOT ms", "overhead %",
                     "tokens = eager", "error"], rows)]


def write_files(out: Path, data: dict[str, Any]) -> None:
    """report.md and the JSON files of ``data`` in ``out`` (8 files at most, the device
    tool's limit)."""
    bulky = {"devices": "devices.json", "campaign": "campaign.json",
             "export_json": "summary.json"}
    for key, fname in bulky.items():
        if key in data:
            (out / fname).write_text(json.dumps(data[key], indent=1, default=str))
    telemetry = {k: data[k] for k in ("nvml", "sampler", "harness", "decode") if k in data}
    (out / "telemetry.json").write_text(json.dumps(telemetry, indent=1))
    rest = {k: v for k, v in data.items()
            if k not in bulky and k not in telemetry and k != "export_md"}
    (out / "steps.json").write_text(json.dumps(rest, indent=1, default=str))
    (out / "report.md").write_text(render(data))


def copy_db(db: Path, to: Path) -> None:
    """A consistent copy of ``db`` (SQLite's backup API), ready to commit.

    The copy inherits the work database's WAL mode, and a WAL database opened later
    grows -wal/-shm files beside it: switched to DELETE, it is one self-contained
    file (docs/gpu-runs/ keeps databases so).
    """
    if not db.exists():
        return
    src, dst = sqlite3.connect(db), sqlite3.connect(to)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")
    finally:
        src.close()
        dst.close()
