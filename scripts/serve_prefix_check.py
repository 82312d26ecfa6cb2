"""What scripts/serve_prefix_check.sh's two campaigns stored of the engine's prefix cache,
against the engine's own /metrics counters; exit 1 on a mismatch.

    serve_prefix_check.py ENGINE DB WORKDIR PREFIX_TOKENS PREFIX_GROUPS

Per run: its rate, its requests' prompt tokens and cached tokens (warm-up included: the
engine counts them too), what the first request of each prefix group found (the prefix
is new to the cache at each point with prompt_draw = "point"), the most any measured
request found of its own part (past the BOS and the prefix), and its note. Per campaign:
the stored sums against the counters' growth over it.
"""

import sqlite3
import sys

COUNTERS = {
    # (prompt tokens, cached prompt tokens) as each engine counts them
    "vllm": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    "sglang": ("sglang:prompt_tokens_total", "sglang:cached_tokens_total"),
}


def counters(path):
    with open(path) as f:
        return {k: float(v) for k, v in (line.split() for line in f)}


def main(engine, db, work, prefix, groups):
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    bad = []

    def check(what, ok, seen):
        print(f"{'ok' if ok else 'FAIL':<4} {what}{'' if ok else f': {seen!r}'}")
        if not ok:
            bad.append(what)

    for draw in ("point", "seed"):
        runs = con.execute("select r.id, r.status, r.note, (select json_extract(k.config_key, "
                           "'$.request_rate') from job_configs k where k.campaign_id = "
                           "r.campaign_id and k.first_position = j.position) as request_rate "
                           "from runs r join "
                           "jobs j on j.id = r.job_id join campaigns c on c.id = "
                           "r.campaign_id where c.name = ? order by r.id",
                           (f"prefix-{draw}",)).fetchall()
        print(f"== prompt_draw = \"{draw}\": {len(runs)} runs")
        total_p = total_c = 0
        for i, run in enumerate(runs):
            rows = con.execute("select request, warmup, prompt_tokens, cached_tokens from "
                               "serve_requests where run_id = ? order by request",
                               (run["id"],)).fetchall()
            p = sum(r["prompt_tokens"] or 0 for r in rows)
            c = sum(r["cached_tokens"] or 0 for r in rows)
            total_p, total_c = total_p + p, total_c + c
            first = [r["cached_tokens"] for r in rows[:groups]]
            # past the BOS and the prefix (vLLM's whole blocks may stop short of them)
            own = max(max(0, (r["cached_tokens"] or 0) - prefix - 1) for r in rows
                      if not r["warmup"])
            print(f"run {run['id']} rate {run['request_rate']}: {run['status']}, {len(rows)} "
                  f"requests, prompt tokens {p}, cached {c} ({100.0 * c / max(p, 1):.0f} %); "
                  f"first of each group cached {first}; most of a measured request's own "
                  f"part cached {own}; note: {run['note']}")
            check(f"{draw} run {i + 1} ok, cached_tokens stored", run["status"] == "ok" and all(
                r["cached_tokens"] is not None for r in rows), run["status"])
            if draw == "point" or i == 0:
                check(f"{draw} run {i + 1}: each group's prefix new to the cache",
                      all(f < prefix for f in first), first)
                check(f"{draw} run {i + 1}: no measured request found its own part cached",
                      own < 16, own)
            else:
                check(f"{draw} run {i + 1}: every request found its own part cached",
                      "prompts repeated" in (run["note"] or ""), run["note"])
        before = counters(f"{work}/metrics-{draw}-before.txt")
        after = counters(f"{work}/metrics-{draw}-after.txt")
        grown = {k: after[k] - before.get(k, 0.0) for k in after}
        print("engine counters grown: " + ", ".join(
            f"{k} {v:g}" for k, v in sorted(grown.items())
            if v and ("cache" in k or "prompt_tokens" in k)))
        queries, hits = COUNTERS[engine]
        print(f"stored: prompt tokens {total_p}, cached {total_c}; engine: {queries} "
              f"{grown.get(queries)}, {hits} {grown.get(hits)}")
        check(f"{draw}: stored cached tokens = the engine's {hits}",
              grown.get(hits) == total_c, (total_c, grown.get(hits)))
        check(f"{draw}: stored prompt tokens = the engine's {queries}",
              grown.get(queries) == total_p, (total_p, grown.get(queries)))
    print(f"{len(bad)} check(s) failed" if bad else "all checks held")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
