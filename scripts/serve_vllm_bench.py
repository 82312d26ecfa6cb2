"""dltop's serve figures beside vLLM's own ``vllm bench serve``, run in turn against one vLLM
server by scripts/serve_vllm_bench.sh (docs/serving.md, "Checked against real servers").

    serve_vllm_bench.py prompts FILE SEED N_PROMPTS WORDS
        a ShareGPT JSON of N_PROMPTS fresh prompts of WORDS words (each one token of the
        tiny model's vocabulary: scripts/serve_tiny_llama.py), read by both tools
    serve_vllm_bench.py compare WORKDIR PAIRS
        vLLM's result files WORKDIR/vllm-I.json and dltop's campaigns dltop-I in
        WORKDIR/vbench.db (I = 1..PAIRS): a table, exit 1 on a disagreement not explained

A figure agrees when the two tools' medians over their runs differ by no more than the
wider of the two tools' run-to-run ranges (the noise measured here). Where the definitions
differ (read from vllm/benchmarks/serve.py and lib/endpoint_request_func.py, vLLM 0.32),
the figure is also compared as the other tool defines it, from the same stored times:

- E2E: vLLM's ends at the last chunk with ``choices`` (its usage chunk and ``[DONE]``
  after it are not timed); dltop's at ``[DONE]``. dltop's is compared less its own
  stored tail (e2e - its last chunk's time), per request.
- req/s and out tok/s: vLLM divides by its benchmark's duration, from before the first
  arrival's drawn delay (its schedule's first request waits one gap) to the end of the
  last request; dltop by its window, the first measured send to the last end. vLLM's is
  also computed over dltop's window, from its own start times and latencies.
- ITL: vLLM's is per chunk (dltop's ``itl-chunk``); dltop's default ``itl`` is per token.
"""

import json
import os
import random
import sqlite3
import statistics
import struct
import subprocess
import sys
from pathlib import Path

COMMON = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on",
          "be", "at", "by", "this", "from", "or", "an", "are", "not", "but", "all"]
WORDS = COMMON + [f"w{i}" for i in range(200)]


def prompts(path, seed, n, words):
    r = random.Random(seed)
    conv = [{"conversations": [
        {"from": "human", "value": " ".join(r.choice(WORDS) for _ in range(words))},
        {"from": "gpt", "value": "the"}]} for _ in range(n)]
    Path(path).write_text(json.dumps(conv))


def pct(values, p):
    """numpy's default (linear) percentile, as vLLM's bench and dltop both take."""
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (k - lo)


def vllm_figures(path):
    d = json.loads(Path(path).read_text())
    ends = [s + lat for s, lat in zip(d["start_times"], d["latencies"], strict=True)]
    span = max(ends) - min(d["start_times"])
    f = {m + " " + p: d[f"{p}_{k}_ms"] for m, k in (("TTFT", "ttft"), ("TPOT", "tpot"),
                                                    ("ITL/chunk", "itl"), ("E2E", "e2el"))
         for p in ("p50", "p99")}
    f.update({"req/s": d["request_throughput"], "out tok/s": d["output_throughput"],
              "req/s over the sends": d["completed"] / span,
              "out tok/s over the sends": d["total_output_tokens"] / span,
              "prompt tokens": d["total_input_tokens"], "output tokens":
              d["total_output_tokens"], "requests ok": d["completed"],
              "chunks": sum(len(x) + 1 for x in d["itls"]), "TTFT mean": d["mean_ttft_ms"],
              "lead s": d["duration"] - span})
    return f


def dltop_figures(root, db, name):
    out = subprocess.run([sys.executable, "-m", "dltop", "--db", db, "export", "--campaign",
                          name, "--table", "summary", "--format", "json"],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(root) / "src")})
    row = json.loads(out.stdout)["rows"][0]
    det = row["detail"]
    f = {m + " " + p: det[k][p + "_s"] * 1e3 for m, k in (("TTFT", "ttft"), ("TPOT", "tpot"),
                                                         ("ITL/chunk", "itl-chunk"),
                                                         ("ITL/token", "itl"), ("E2E", "latency"))
         for p in ("p50", "p99")}
    f.update({"req/s": row["req-rate"], "out tok/s": row["output-rate"],
              "flags": row.get("flags") or ""})
    con = sqlite3.connect(db)
    rs = con.execute("select q.e2e_s, q.chunk_s, q.prompt_tokens, q.output_tokens from "
                     "serve_requests q join runs r on r.id = q.run_id join campaigns c on "
                     "c.id = r.campaign_id where c.name = ? and not q.warmup and q.status = 200 "
                     "and q.error is null", (name,)).fetchall()
    tail = [e2e - struct.unpack("<d", chunks[-8:])[0] for e2e, chunks, _, _ in rs]
    e2e_less = [(e2e - t) * 1e3 for (e2e, *_), t in zip(rs, tail, strict=True)]
    f.update({"E2E p50 to the last chunk": pct(e2e_less, 50),
              "E2E p99 to the last chunk": pct(e2e_less, 99),
              "tail ms p50": pct([t * 1e3 for t in tail], 50),
              "prompt tokens": sum(r[2] for r in rs), "output tokens": sum(r[3] for r in rs),
              "requests ok": len(rs), "chunks": sum(len(r[1]) // 8 for r in rs),
              "TTFT mean": statistics.mean(x for (x,) in con.execute(
                  "select q.ttft_s * 1e3 from serve_requests q join runs r on r.id = q.run_id "
                  "join campaigns c on c.id = r.campaign_id where c.name = ? and not q.warmup "
                  "and q.error is null", (name,)))})
    return f


def server_ttft_ms(before, after):
    """vLLM's own mean TTFT over a run (its /metrics, warm-ups included): engine arrival to
    its first token, without the HTTP path either side."""
    def read(path):
        return {k: float(v) for k, v in (line.split() for line in Path(path).read_text()
                                         .splitlines())}
    b, a = read(before), read(after)
    k = "vllm:time_to_first_token_seconds_"
    return (a[k + "sum"] - b.get(k + "sum", 0)) / (a[k + "count"] - b.get(k + "count", 0)) * 1e3


ROWS = [  # (vLLM's figure, dltop's figure of the same definition, what dltop reports)
    ("TTFT p50", "TTFT p50", None), ("TTFT p99", "TTFT p99", None),
    ("TPOT p50", "TPOT p50", None), ("TPOT p99", "TPOT p99", None),
    ("ITL/chunk p50", "ITL/chunk p50", "ITL/token p50"),
    ("ITL/chunk p99", "ITL/chunk p99", "ITL/token p99"),
    ("E2E p50", "E2E p50 to the last chunk", "E2E p50"),
    ("E2E p99", "E2E p99 to the last chunk", "E2E p99"),
    ("req/s over the sends", "req/s", None), ("out tok/s over the sends", "out tok/s", None),
    ("chunks", "chunks", None),
]
EXACT = ["requests ok", "prompt tokens", "output tokens"]


def fmt(x):
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def compare(work, pairs):
    root = Path(__file__).resolve().parent.parent
    w = Path(work)
    v = [vllm_figures(w / f"vllm-{i}.json") for i in range(1, pairs + 1)]
    d = [dltop_figures(root, str(Path(work) / "vbench.db"), f"dltop-{i}")
         for i in range(1, pairs + 1)]
    bad = []
    print(f"{'figure (ms, or as named)':<28} {'vLLM bench serve (runs)':<26} "
          f"{'dltop (runs)':<26} {'medians':<17} {'noise':>7}  verdict")

    def row(label, vk, dk, note=""):
        vs, ds = [f[vk] for f in v], [f[dk] for f in d]
        mv, md = statistics.median(vs), statistics.median(ds)
        noise = max(max(vs) - min(vs), max(ds) - min(ds))
        ok = abs(mv - md) <= noise
        verdict = ("agree" if ok else "DISAGREE") + note
        if not ok:
            bad.append(label)
        print(f"{label:<28} {' '.join(fmt(x) for x in vs):<26} {' '.join(fmt(x) for x in ds):<26}"
              f" {fmt(mv) + ' / ' + fmt(md):<17} {fmt(noise):>7}  {verdict}")

    for vk, dk, shown in ROWS:
        note = ""
        if vk.startswith("ITL"):
            per_token = " ".join(fmt(f[shown]) for f in d)
            note = f" (dltop's itl-chunk; its default per-token ITL: {per_token})"
        elif vk.startswith("E2E"):
            tail = fmt(statistics.median(f["tail ms p50"] for f in d))
            stored = " ".join(fmt(f[shown]) for f in d)
            note = f" (dltop's less its tail after the last chunk, p50 {tail} ms; as stored: " \
                f"{stored})"
        elif vk.startswith(("req/s", "out tok/s")):
            key = vk.replace(" over the sends", "")
            theirs = " ".join(fmt(f[key]) for f in v)
            lead = " ".join(fmt(f["lead s"]) for f in v)
            note = f" (vLLM's over dltop's window; as vLLM reports it: {theirs}, its lead " \
                f"{lead} s)"
        row(vk.replace(" over the sends", ""), vk, dk, note)
    for k in EXACT:
        vs, ds = [f[k] for f in v], [f[k] for f in d]
        ok = vs == ds
        if not ok:
            bad.append(k)
        print(f"{k:<28} {' '.join(map(str, vs)):<26} {' '.join(map(str, ds)):<26} "
              f"{'':<17} {'0':>7}  {'equal' if ok else 'DIFFER'}")
    # where each tool's client time goes beyond the server's own (no verdict: the HTTP path)
    extra = [[fs[i]["TTFT mean"] - server_ttft_ms(w / f"metrics-{t}{i + 1}.before",
                                                  w / f"metrics-{t}{i + 1}.after")
              for i in range(pairs)] for t, fs in (("v", v), ("d", d))]
    print(f"{'TTFT mean, client - server':<28} {' '.join(fmt(x) for x in extra[0]):<26} "
          f"{' '.join(fmt(x) for x in extra[1]):<26} (vLLM's /metrics over each run)")
    if statistics.median(extra[1]) > max(extra[0]):
        print("dltop's client saw more TTFT beyond vLLM's own than vLLM's bench did: the cost "
              "of `dltop run` beside its runner on a host the server saturates (docs/serving.md, "
              "Beside vllm bench serve)")
    flags = {f["flags"] for f in d} - {""}
    if flags:
        print(f"dltop's flags on its runs: {'; '.join(sorted(flags))}")
    print(f"{len(bad)} figures disagree: {', '.join(bad)}" if bad else
          "every figure agrees within the run-to-run noise, or as the other tool defines it")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "prompts":
        prompts(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], int(sys.argv[3])))
    sys.exit(__doc__)
