"""The ``serve`` step of scripts/gpu_check.py: issue 41 on a GPU (docs/gpu.md).

    python scripts/gpu_check_serve.py make-model NAME FOLDER DEVICE DTYPE

saves a random-weight Hugging Face model of dltop's transformer shape NAME
(``dltop.runners.child.lm_catalog.SHAPES``: GPT-2 blocks or Llama 3 blocks, the output
projection tied to the embedding) with ``save_pretrained``, and a word-level tokenizer
of the shape's vocabulary (``w0`` ... one token each, built with ``tokenizers``): no
download. The step (:func:`run_step`) makes one per model of the profile, then runs
scripts/gpu_check_serve.toml with ``dltop run``: dltop's own ``generate`` runs of those
shapes beside ``transformers serve`` (started by dltop, ``[servers.NAME]``) serving the
saved folders (each serve entry says the shape it serves: ``shape = NAME``), at
concurrency 1 and over a request-rate sweep, into the check's database; ``dltop export
--table overhead`` states the server's overhead per token against the generate runs,
``--table summary`` gives J/token against the rate; :func:`render` draws the report's
section.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from gpu_check_base import StepTimeout, call, tail

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROFILE = HERE / "gpu_check_serve.toml"
MAKE_LIMIT_S = 150.0
"""Making one model (llama-1b: 1.2 billion weights initialised, 2.5 GB written)."""
EXPORT_COLUMNS = ("model", "framework", "mode", "concurrency", "request_rate", "runs", "ttft",
                  "tpot", "req-rate", "output-rate", "power", "energy", "j-per-token",
                  "flags")
"""The export's columns for docs/gpu.md (summary keys; those no row has are left out)."""
CPU_PROFILE = """
name = "gpu-check-serve-cpu"
description = "gpu_check.py's serve step without a GPU: the plumbing on CPU, gpt-tiny"
[defaults]
repeats = 1
prompt_tokens = 16
new_tokens = 8
devices = ["cpu:1"]
timeout_s = 150
[servers.transformers-cpu]
command = "@PYTHON@ -m transformers.cli.transformers serve {model} --port {port} \
--device cpu --dtype float32"
ready_url = "http://{host}:{port}/health"
timeout_s = 120
[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [1]
mode = "generate"
iterations = 4
warmup = 1
min_time_s = 1
[[matrix]]
frameworks = ["openai"]
mode = "serve"
models = ["@MODEL:gpt-tiny@"]
shape = "gpt-tiny"
server = "transformers-cpu"
dataset = "@PROMPTS:gpt-tiny@"
concurrency = 1
iterations = 4
warmup = 1
[[matrix]]
frameworks = ["openai"]
mode = "serve"
models = ["@MODEL:gpt-tiny@"]
shape = "gpt-tiny"
server = "transformers-cpu"
dataset = "@PROMPTS:gpt-tiny@"
concurrency = 4
request_rate = [2, 4]
iterations = 4
warmup = 1
"""
"""The ``--no-gpu`` variant: the same plumbing (generate runs, a server dltop starts,
concurrency 1, a rate sweep, export), small enough for a shared CPU."""


def make_model(name: str, folder: Path, device: str, dtype: str) -> dict[str, Any]:
    """Save a random model of dltop's shape ``name`` and its word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    from dltop.runners.child import lm_catalog

    s = lm_catalog.shape(name)
    # <unk> and <eos> first, then a word per remaining id: every id a word, one token each
    words = ["<unk>", "<eos>"] + [f"w{i}" for i in range(s["vocab"] - 2)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                   eos_token="<eos>", bos_token="<eos>")
    # the prompt's words only: its token count is the prompt's (no template tokens)
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    torch.manual_seed(0)
    if s["family"] == lm_catalog.GPT:
        cfg: Any = GPT2Config(vocab_size=s["vocab"], n_positions=s["context"],
                              n_embd=s["d_model"], n_layer=s["layers"], n_head=s["heads"],
                              n_inner=s["ffn"], layer_norm_epsilon=lm_catalog.LN_EPS,
                              eos_token_id=1, bos_token_id=1, tie_word_embeddings=True)
        cls: Any = GPT2LMHeadModel
    else:
        cfg = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["d_model"],
                          intermediate_size=s["ffn"], num_hidden_layers=s["layers"],
                          num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                          max_position_embeddings=s["context"], rope_theta=s["rope_theta"],
                          rms_norm_eps=lm_catalog.LN_EPS, tie_word_embeddings=True,
                          eos_token_id=1, bos_token_id=1)
        cls = LlamaForCausalLM
    dt = getattr(torch, dtype)
    with torch.device(device):  # llama-1b's 1.2 billion weights initialised on the GPU
        model = cls(cfg).to(dt)
    model.generation_config.pad_token_id = 1
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    return {"model": name, "folder": str(folder), "parameters": params, "dtype": dtype,
            "vocab": s["vocab"]}


def prompts(vocab: int, count: int, words: int, seed: int = 0) -> str:
    """A JSONL of ``count`` prompts of exactly ``words`` tokens of the model's own
    vocabulary (``w2`` ... ``w{vocab-1}``'s words; not ``<unk>``, from which a random
    model may answer only special tokens, which the server skips)."""
    import random

    rng = random.Random(seed)
    lines = [json.dumps(" ".join(f"w{rng.randrange(vocab - 2)}" for _ in range(words)))
             for _ in range(count)]
    return "\n".join(lines) + "\n"


def profile_text(template: str, work: Path, python: str) -> tuple[str, dict[str, Path]]:
    """The profile with its placeholders filled: ``@PYTHON@`` (this interpreter, which
    has the carried transformers), ``@MODEL:NAME@`` (the folder of the model of shape
    NAME, made by :func:`make_model`) and ``@PROMPTS:NAME@`` (its prompts' JSONL)."""
    names = sorted(set(re.findall(r"@(?:MODEL|PROMPTS):([\w.-]+)@", template)))
    # the folder is the served model's name too (transformers serve refuses a request
    # naming another model than the one it was started with): named after the shape
    folders = {n: work / "models" / n for n in names}
    text = template.replace("@PYTHON@", python)
    for n, folder in folders.items():
        text = text.replace(f"@MODEL:{n}@", str(folder))
        text = text.replace(f"@PROMPTS:{n}@", str(work / f"prompts-{n}.jsonl"))
    return text, folders


def run_step(check: Any, limit: float) -> str:
    """Make the models, run the serve profile, export its table; ``check.data["serve"]``.

    ``check`` is gpu_check.py's ``Check`` (work folder, database, GPU mode, its
    ``dltop`` argv)."""
    t_end = time.monotonic() + limit
    # the models are local folders: never a hub look-up (the lent machines have no network)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gpu = check.gpu
    template = PROFILE.read_text() if gpu else CPU_PROFILE
    text, folders = profile_text(template, check.work, sys.executable)
    spec = tomllib.loads(text)
    words = int(spec.get("defaults", {}).get("prompt_tokens", 128))
    sv: dict[str, Any] = {"profile": str(PROFILE) if gpu else "CPU_PROFILE", "models": []}
    check.data["serve"] = sv
    for name, folder in folders.items():
        t = time.monotonic()
        res = call([sys.executable, str(Path(__file__)), "make-model", name, str(folder),
                    "cuda" if gpu else "cpu", "bfloat16" if gpu else "float32"],
                   min(MAKE_LIMIT_S, t_end - time.monotonic() - 60), ROOT)
        if res.timed_out or res.rc != 0:
            raise RuntimeError(f"making {name} failed: {tail(res.err or res.out)}")
        made = json.loads(res.out.strip().splitlines()[-1])
        made["seconds"] = round(time.monotonic() - t, 1)
        sv["models"].append(made)
        (check.work / f"prompts-{name}.jsonl").write_text(prompts(made["vocab"], 64, words))
    prof = check.work / "serve.toml"
    prof.write_text(text)
    res = call(check.dltop("run", str(prof), "--db", str(check.db), "--headless"),
               t_end - time.monotonic() - 30, ROOT)
    sv["log"] = tail(res.out + "\n" + res.err, 40)
    if check.db.exists():
        base = check.dltop("export", "--db", str(check.db), "--campaign", spec["name"],
                           "--table", "summary")
        got = call([*base, "--format", "json"], 60, ROOT)
        sv["export"] = json.loads(got.out) if got.rc == 0 else {"error": tail(got.err)}
        rows = sv["export"].get("rows", [])
        # J/token is a summary column only where a configuration has it (a GPU run)
        cols = ",".join(c for c in EXPORT_COLUMNS if any(c in r for r in rows))
        got = call([*base, "--format", "md", "--columns", cols], 60, ROOT)
        sv["export_md"] = got.out if got.rc == 0 else tail(got.err)
        sv["export_command"] = (f"export --campaign {spec['name']} --table summary "
                                f"--format md --columns '{cols}'")
        sv.update(_overhead_export(check, spec["name"]))
    sv["overhead"] = overhead(sv.get("overhead_table", {}).get("rows", []))
    sv["rates"] = rates(sv.get("export", {}).get("rows", []))
    if res.timed_out:
        raise StepTimeout(f"dltop run stopped at the step's limit; {tail(res.out)}")
    if res.rc != 0:
        raise RuntimeError(f"dltop run exit {res.rc}: {tail(res.err or res.out)}")
    if not sv["overhead"]:
        raise RuntimeError("no serve run beside a generate run: "
                           f"{sv.get('overhead_table', {}).get('error', 'no row')}")
    return "; ".join(f"{o['model']}: serve/generate TPOT {_g(o['ratio'])}" for o in
                     sv["overhead"])


def _ms(v: Any) -> float | None:
    return v * 1e3 if isinstance(v, int | float) else None


def _detail(row: dict[str, Any], metric: str, key: str) -> Any:
    return (row.get("detail", {}).get(metric) or {}).get(key)


def _overhead_export(check: Any, campaign: str) -> dict[str, Any]:
    """``dltop export --table overhead`` of the campaign: its JSON, its Markdown (or the
    one line dltop refused it with) and the command, for docs/gpu.md."""
    base = check.dltop("export", "--db", str(check.db), "--campaign", campaign, "--table",
                       "overhead")
    got = call([*base, "--format", "json"], 60, ROOT)
    table = json.loads(got.out) if got.rc == 0 else {"error": tail(got.err)}
    md = call([*base, "--format", "md"], 60, ROOT)
    return {"overhead_table": table, "overhead_md": md.out if md.rc == 0 else tail(md.err),
            "overhead_command": f"export --campaign {campaign} --table overhead"}


def overhead(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's overhead per token, as dltop's overhead table (JSON rows) states it:
    per serve configuration beside a generate one of its shape (``pairing``), the TPOT
    p50s in ms, serve / generate and the difference, the TTFT p50s, what differs."""
    return [{"model": r["shape"], "served": r["served"], "pairing": r["pairing"],
             "request_rate": r["identity"].get("request_rate"),
             "tpot_generate_ms": _ms(r["tpot_generate"]), "tpot_serve_ms": _ms(r["tpot_serve"]),
             "ratio": r["tpot_ratio"], "diff_ms": _ms(r["tpot_diff"]),
             "ttft_generate_ms": _ms(r["ttft_generate"]), "ttft_serve_ms": _ms(r["ttft_serve"]),
             "differs": "; ".join(r["differs"])} for r in rows]


def rates(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """J/token against the rate, from ``dltop export``'s summary rows (JSON): every serve
    row (its shape, the ``shape`` it was run with), each shape's concurrency-1 run first,
    then by rate (rate, achieved rate, TTFT, TPOT, power with the idle power before the
    load, J/token and its net of idle)."""
    out = []
    for r in rows:
        if r.get("mode") != "serve":
            continue
        out.append({
            "model": r.get("identity", {}).get("shape") or r["model"],
            "concurrency": r.get("concurrency"),
            "request_rate": r.get("request_rate"), "status": r["status"],
            "achieved_req_s": r.get("req-rate"), "output_tok_s": r.get("output-rate"),
            "ttft_ms": _ms(r.get("ttft")), "tpot_ms": _ms(r.get("tpot")),
            "power_w": r.get("power"), "idle_w": _detail(r, "power", "idle_power_w"),
            "j_per_token": r.get("j-per-token"),
            "j_per_token_net": _detail(r, "j-per-token", "net_j"),
            "why": r.get("reasons", {}).get("j-per-token") or r.get("reasons", {}).get(
                "power"), "flags": r.get("flags")})
    # each model's concurrency-1 run first, then its sweep by rate ("inf" last)
    out.sort(key=lambda x: (x["model"], x["concurrency"] != 1, _rate(x["request_rate"])))
    return out


def _rate(v: Any) -> float:
    return float(v) if isinstance(v, int | float) else float("inf")


def _g(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _cells(vals: list[Any]) -> str:
    return "| " + " | ".join(_g(v) if isinstance(v, float) else ("–" if v is None else str(v))
                             for v in vals) + " |"


def render(d: dict[str, Any]) -> list[str]:
    """The report's serve section: the models made, dltop's overhead table, J/token
    against the rate, the summary export."""
    sv = d.get("serve")
    if not sv:
        return []
    out = ["Random-weight models of dltop's shapes, saved with `save_pretrained` (no "
           "download), served by `transformers serve` (started by dltop, `[servers.NAME]` "
           "of the profile) beside dltop's own `generate` runs of the same shapes, prompt "
           "and new tokens; batch 1. Raw: steps.json (`serve`), campaign.db.", ""]
    out += [f"- {m['model']}: {m['parameters']:,} parameters, {m['dtype']}, made in "
            f"{m['seconds']} s" for m in sv.get("models", [])]
    out += ["", "**The server's overhead per output token**, as dltop states it (`dltop "
            f"{sv.get('overhead_command', 'export --table overhead')}`; TPOT = (e2e − TTFT) "
            "/ (tokens − 1)):", "", (sv.get("overhead_md") or "(no table)").rstrip()]
    out += ["", "**J/token against the request rate** (the GPUs' energy over the measured "
            "window / output tokens; net: less the idle power measured just before the load "
            "× the window):", "",
            "| model | concurrency | rate asked /s | achieved /s | out tok/s | TTFT p50 ms "
            "| TPOT p50 ms | power W | idle W | J/token | J/token net | status | flags / why |",
            "|---" * 13 + "|"]
    out += [_cells([r["model"], r["concurrency"], r["request_rate"], r["achieved_req_s"],
                    r["output_tok_s"], r["ttft_ms"], r["tpot_ms"], r["power_w"], r["idle_w"],
                    r["j_per_token"], r["j_per_token_net"], r["status"],
                    "; ".join(x for x in (r["flags"], r["why"]) if x)])
            for r in sv.get("rates", [])]
    if sv.get("export_md"):
        out += ["", f"`dltop {sv.get('export_command', 'export')}` (for docs/gpu.md's "
                "marker, with `--db` of the committed campaign.db):", "",
                sv["export_md"].rstrip()]
    if sv.get("log"):
        out += ["", "```", sv["log"], "```"]
    return out


def main() -> int:
    if sys.argv[1] == "make-model":
        name, folder, device, dtype = sys.argv[2:6]
        print(json.dumps(make_model(name, Path(folder), device, dtype)))
        return 0
    raise SystemExit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    raise SystemExit(main())
