"""PyTorch transformer runner on one CUDA GPU: training MFU, generation latency and the
decode loop's own overhead, with only the standard library and PyTorch.

Runs the child runner (``torch_runner.py``) as dltop's supervisor would (a spec
file, events on a pipe) for the training cases, and the generation pieces
in-process for the decode overhead: ``lm_loop.run_generate`` (dltop's timing)
against a bare loop of the same ``Generator.decode`` calls. MFU uses the
runner's ``flops_per_sample`` (per token) and ``--peak-tflops`` (989.4: H100/H200
SXM bf16 dense, dltop.results.peaks).

    python3 benchmarks/torch_lm_gpu.py [--quick] [--out results.json]
    python3 benchmarks/torch_lm_gpu.py --cpu-smoke   # the script's own check, no GPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD_DIR = Path(__file__).resolve().parents[1] / "src" / "dltop" / "runners" / "child"

BASE_SPEC = {
    "profile": "lm-gpu", "framework": "torch", "batch_size": 1, "device": {"kind": "gpu",
                                                                          "count": 1},
    "repeat": 0, "iterations": 10, "warmup": 3, "timeout_s": 600, "precision": "bf16",
    "data": "synthetic", "data_dir": None, "batch_scaling": "global", "lr": 3e-4,
    "momentum": 0.0, "seed": 0, "optimizer": "adamw", "weight_decay": 0.0, "mode": "train",
    "epochs": None, "eval_every": None, "target_accuracy": None, "shuffle": None,
    "op_profile": False, "input_size": None, "data_loader": "device", "loader_workers": 0,
    "channels_last": False, "torch_compile": "off", "cudnn_benchmark": True,
    "cuda_graphs": False, "seq_len": None, "attention": "fused", "prompt_tokens": None,
    "new_tokens": None, "nodes": 1, "executor": "local", "options": {}, "retries": 0,
    "v": 1, "run_id": 1,
}


def run_child(job: dict, timeout: float = 600) -> tuple[int, list[dict], str]:
    """Run torch_runner.py on ``job``; exit code, events, output."""
    cuda = "" if job["device"]["kind"] == "cpu" else "0"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(job))
        r, w = os.pipe()
        env = {**os.environ, "DLTOP_EVENT_FD": str(w), "CUDA_VISIBLE_DEVICES": cuda}
        proc = subprocess.Popen([sys.executable, str(CHILD_DIR / "torch_runner.py"),
                                 str(path)], pass_fds=(w,), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            lines = fh.read().splitlines()
        out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, [json.loads(x) for x in lines], out.decode(errors="replace")


def train_case(model: str, batch: int, seq_len: int, compile_mode: str, peak: float,
               iterations: int, cpu: bool = False) -> dict:
    job = {**BASE_SPEC, "model": model, "batch_size": batch, "per_device_batch": batch,
           "samples_per_iter": batch, "seq_len": seq_len, "torch_compile": compile_mode,
           "iterations": iterations}
    if cpu:
        job.update(device={"kind": "cpu", "count": 1}, precision="fp32")
    t0 = time.perf_counter()
    code, events, out = run_child(job)
    res: dict = {"case": f"train {model} b{batch} T{seq_len} compile={compile_mode}",
                 "code": code, "wall_s": round(time.perf_counter() - t0, 1)}
    if code != 0:
        res["error"] = out[-3000:]
        return res
    flops = next(e for e in events if e["event"] == "model")["flops_per_sample"]
    its = [e for e in events if e["event"] == "iter" and not e["warmup"]]
    sec = statistics.median(e["seconds"] for e in its)
    tok_s = its[0]["samples"] / sec
    setup = [e for e in events if e["event"] == "setup"]
    res.update(step_s=round(sec, 5), tokens_per_s=round(tok_s), mfu=round(
        tok_s * flops / (peak * 1e12), 4), losses=[round(e["loss"], 3) for e in its[:3]],
        setup=setup[0] if setup else None)
    return res


class _Collect:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def emit(self, event: str, **fields: object) -> None:
        self.events.append({"event": event, **fields})

    def generation(self, index, warmup, ttft_s, itl_s, prompt_tokens, new_tokens, batch):
        self.emit("generate", index=index, warmup=warmup, ttft_s=ttft_s, itl_s=list(itl_s))

    def iteration(self, index, seconds, samples, warmup, loss, t_mono_ns=None):
        self.emit("iter", index=index, seconds=seconds, warmup=warmup)


def generate_case(model: str, batch: int, mode: str, graphs: bool, requests: int,
                  cpu: bool = False) -> dict:
    """dltop's loop (lm_loop) vs a bare loop of the same decode calls, in one process."""
    import lm_loop
    import torch
    import torch_lm
    import torch_lm_steps

    spec = {**BASE_SPEC, "model": model, "mode": "generate", "per_device_batch": batch,
            "samples_per_iter": batch, "torch_compile": mode, "cuda_graphs": graphs,
            "warmup": 2, "iterations": requests}
    if cpu:
        spec.update(precision="fp32", prompt_tokens=16, new_tokens=8)
    spec = torch_lm_steps.with_defaults(spec)
    dev = torch.device("cpu") if cpu else torch.device("cuda", 0)
    torch.manual_seed(0)
    model_ = torch_lm.build(model, "fused", dev)
    gen = torch_lm_steps.Generator(spec, model_, dev)
    rep = _Collect()
    gen.prepare(rep)
    new = spec["new_tokens"]
    one = {**spec, "warmup": 0, "iterations": 1}

    def timed() -> float:
        """One request through dltop's loop: its mean seconds per output token."""
        r = _Collect()
        lm_loop.run_generate(one, r, gen.prefill, gen.decode)
        rep.events.extend(r.events)
        return statistics.fmean(r.events[0]["itl_s"])

    def bare_request() -> float:
        """The same request's decode calls timed as a whole, per output token."""
        gen.prefill()
        t0 = time.perf_counter()
        for _ in range(new - 1):
            gen.decode()
        return (time.perf_counter() - t0) / (new - 1)

    for _ in range(2):  # warm-up requests on both sides, not counted
        timed()
        bare_request()
    rep.events.clear()
    # Rounds alternate which side goes first (ABBA), so a drift of the machine (clocks,
    # allocator, caches) falls on both sides alike; each round gives one paired ratio.
    loop_s, bare = [], []
    for i in range(requests):
        if i % 2:
            b, a = bare_request(), timed()
        else:
            a, b = timed(), bare_request()
        loop_s.append(a)
        bare.append(b)
    gens = [e for e in rep.events if e["event"] == "generate"]
    itl = [x for e in gens for x in e["itl_s"]]
    tokens = gen.tokens
    tpot, bare_tpot = statistics.median(loop_s), statistics.median(bare)
    paired = statistics.median(a / b for a, b in zip(loop_s, bare, strict=True))
    # The same request again gives the same greedy tokens (and eager gives them too).
    eager = torch_lm_steps.Generator({**spec, "torch_compile": "off", "cuda_graphs": False},
                                     model_, dev)
    eager.prefill()
    for _ in range(spec["new_tokens"] - 1):
        eager.decode()
    same = sum(a == b for a, b in zip(tokens, eager.tokens, strict=True)) / len(tokens)
    return {"case": f"generate {model} b{batch} compile={mode} cuda_graphs={graphs}",
            "ttft_ms": round(1e3 * statistics.median(e["ttft_s"] for e in gens), 3),
            "tpot_ms": round(1e3 * tpot, 4), "itl_p50_ms": round(1e3 * statistics.median(itl),
                                                                  4),
            "bare_tpot_ms": round(1e3 * bare_tpot, 4),
            "overhead": round(tpot / bare_tpot - 1.0, 4), "requests": requests,
            "paired_overhead": round(paired - 1.0, 4),
            "eager_token_agreement": round(same, 3), "setup": gen.setup_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peak-tflops", type=float, default=989.4)
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--only", default="train,generate")
    ap.add_argument("--out", default=None)
    ap.add_argument("--generate-cases", default="graphs,eager,reduce-overhead",
                    help="which decode steps: graphs (CUDA graph), eager, reduce-overhead")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="gpt-tiny on the CPU: checks this script, measures nothing")
    args = ap.parse_args()
    sys.path.insert(0, str(CHILD_DIR))
    if args.cpu_smoke:
        print(json.dumps(train_case("gpt-tiny", 2, 32, "off", args.peak_tflops, 2, True)))
        print(json.dumps(generate_case("gpt-tiny", 2, "off", False, 2, True)))
        return 0
    its = 6 if args.quick else 20
    results = []

    def report(res: dict) -> None:
        results.append(res)
        print(json.dumps(res), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))

    if "train" in args.only:
        report(train_case("gpt2-small", 16, 1024, "default", args.peak_tflops, its))
        report(train_case("llama-1b", 8, 2048, "default", args.peak_tflops, its))
        report(train_case("gpt2-small", 16, 1024, "off", args.peak_tflops, its))
    if "generate" in args.only:
        cases = {"graphs": ("off", True), "eager": ("off", False),
                 "reduce-overhead": ("reduce-overhead", False)}
        for name in args.generate_cases.split(","):
            mode, graphs = cases[name.strip()]
            try:
                report(generate_case("gpt2-small", 1, mode, graphs, 6 if args.quick else 12))
            except Exception as exc:  # report it and go on to the next case
                report({"case": f"generate compile={mode} graphs={graphs}",
                        "error": repr(exc)[:2000]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
