"""What scripts/serve_engine_sglang.sh's campaigns stored, against what SGLang 0.5.23 on
CPU does and against its own /metrics counters; exit 1 on a mismatch.

    serve_engine_sglang_check.py DB PROMPT_TOKENS NEW_TOKENS METRICS_BEFORE METRICS_AFTER
"""

import sqlite3
import sys

db, prompt, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def counters(path):
    with open(path) as f:
        return {k: float(v) for k, v in (line.split() for line in f)}


before, after = counters(sys.argv[4]), counters(sys.argv[5])
server = {k: after[k] - before.get(k, 0.0) for k in after}
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
        check(label + ": ok", run["status"] == "ok", (run["status"], run["error_message"]))
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
        # SGLang sends several tokens in one chunk when its detokenizer falls behind
        toks = [sum(int.from_bytes(q["chunk_tokens"][i:i + 4], "little")
                    for i in range(0, len(q["chunk_tokens"]), 4)) for q in rs]
        check(label + ": the chunks' tokens add up to usage's",
              toks == [q["output_tokens"] for q in rs], toks)
        print(f"     chunks per request: {[len(q['chunk_s']) // 8 for q in rs]}")
    check("started: cold start stored once, on the group's first run",
          chat["server_cold_start_s"] is not None and chat["server_cold_start_s"] > 0
          and comp["server_cold_start_s"] is None, (chat["server_cold_start_s"],
                                                   comp["server_cold_start_s"]))
    print(f"     cold start {chat['server_cold_start_s'] or 0:.1f} s")
    check("endpoint: no cold start", ep_chat["server_cold_start_s"] is None,
          ep_chat["server_cold_start_s"])
    check("unforced: lengths not forced, said in the note", free["length_forced"] == 0
          and (free["note"] or "").startswith("lengths not forced"),
          (free["status"], free["note"]))
    print(f"     unforced: {free['note']}; lengths "
          f"{[q['output_tokens'] for q in reqs(free)]}")
    errs = {q["error"][:60] for q in reqs(refused)}
    check("max_tokens over the context: every request stored as SGLang's 400, run failed",
          refused["status"] == "crashed" and len(reqs(refused)) == 2 and all(
              e.startswith("HTTP 400: ") for e in errs), (refused["status"], errs))
    # the endpoint campaign against SGLang's own counters over it (warm-ups included)
    every = [q for r in (ep_chat, ep_comp) for q in reqs(r, warmup=True)]
    out_n, prompt_n = (sum(q[k] for q in every) for k in ("output_tokens", "prompt_tokens"))
    check("SGLang's generation_tokens = dltop's output tokens",
          server.get("sglang:generation_tokens_total") == out_n,
          (server.get("sglang:generation_tokens_total"), out_n))
    check("SGLang's prompt_tokens = dltop's stored prompt tokens",
          server.get("sglang:prompt_tokens_total") == prompt_n,
          (server.get("sglang:prompt_tokens_total"), prompt_n))
    check("SGLang's request count = dltop's", server.get("sglang:num_requests_total")
          == len(every), (server.get("sglang:num_requests_total"), len(every)))
    n = server.get("sglang:time_to_first_token_seconds_count") or 0
    s_ttft = server["sglang:time_to_first_token_seconds_sum"] / n if n else None
    c_ttft = sum(q["ttft_s"] for q in every) / len(every)
    s_ms = f"{s_ttft * 1e3:.2f}" if s_ttft else "n/a"
    print(f"     TTFT mean: SGLang's {s_ms} ms (its metric), dltop's {c_ttft * 1e3:.2f} ms "
          "(the client's)")
    check("SGLang's TTFT mean <= dltop's (the client's includes the HTTP path)",
          s_ttft is not None and s_ttft <= c_ttft, (s_ttft, c_ttft))
    n = server.get("sglang:request_time_per_output_token_seconds_count") or 0
    c_tpot = [(q["e2e_s"] - q["ttft_s"]) / (q["output_tokens"] - 1) for q in every]
    s_ms = (f"{server['sglang:request_time_per_output_token_seconds_sum'] / n * 1e3:.2f}"
            if n else "n/a")
    print(f"     per output token: SGLang's {s_ms} ms, dltop's TPOT mean "
          f"{sum(c_tpot) / len(c_tpot) * 1e3:.2f} ms")
print(f"SGLang: {len(bad)} mismatches" if bad else "SGLang: all checks held")
sys.exit(1 if bad else 0)
