#!/usr/bin/env bash
# dltop's serve figures beside vLLM's own `vllm bench serve`, against one running vLLM (its
# CPU build) with the same prompts and load (docs/serving.md, "Checked against real
# servers"; the definitions compared: docs/metrics.md). On a fresh machine:
#
#   scripts/serve_vllm_bench.sh [WORKDIR]        # default /tmp/dltop-vllm-bench
#
# 1. the venv VLLM_VENV and the tiny random-weight Llama as scripts/serve_engine_vllm.sh
#    makes them (built there when missing: run that script first);
# 2. starts one vLLM server (nice -n 10) and waits for it;
# 3. PAIRS times, in turn: `vllm bench serve` (its ShareGPT loader, --save-result
#    --save-detailed), then a dltop serve campaign (`dataset` = a ShareGPT file of the
#    same shape): fresh prompts per run (no prefix-cache hits between runs), the same
#    request rate, Poisson arrivals, concurrency, requests, warm-ups, max_tokens with
#    ignore_eos, greedy, /v1/completions;
# 4. prints the comparison (scripts/serve_vllm_bench.py compare) and exits with its
#    status: 1 on a disagreement beyond the run-to-run noise that no definition explains,
#    2 when it could not run.
#
# RATE, CONC, REQUESTS, WARMUP, NEW_TOKENS, PROMPT_WORDS, PAIRS: the load (defaults below).
# DLTOP_PYTHON: the interpreter that runs dltop (default: this checkout's .venv, else python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/dltop-vllm-bench}
VLLM_VENV=${VLLM_VENV:-$HOME/.cache/dltop/vllm-venv}
if [[ -z ${DLTOP_PYTHON:-} ]]; then
    if [[ -x $ROOT/.venv/bin/python ]]; then DLTOP_PYTHON=$ROOT/.venv/bin/python
    else DLTOP_PYTHON=python3; fi
fi
RATE=${RATE:-4} CONC=${CONC:-4} REQUESTS=${REQUESTS:-100} WARMUP=${WARMUP:-5}
NEW_TOKENS=${NEW_TOKENS:-16} PROMPT_WORDS=${PROMPT_WORDS:-16} PAIRS=${PAIRS:-3}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export HF_HUB_OFFLINE=1
cmp() { "$DLTOP_PYTHON" "$ROOT/scripts/serve_vllm_bench.py" "$@"; }
metrics() {  # vLLM's own counters before and after a run: $1 the file
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" metrics vllm \
        "http://127.0.0.1:$port/metrics" > "$1"
}

if ! "$VLLM_VENV/bin/python" -c "import vllm" 2>/dev/null; then
    echo "no vLLM in $VLLM_VENV: scripts/serve_engine_vllm.sh builds it"; exit 2
fi
mkdir -p "$WORK"
MODEL=$WORK/tiny-llama
[[ -f $MODEL/model.safetensors ]] || "$VLLM_VENV/bin/python" "$ROOT/scripts/serve_tiny_llama.py" "$MODEL"
rm -f "$WORK/vbench.db" "$WORK"/vllm-*.json "$WORK"/metrics-*

port=$("$DLTOP_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
nice -n 10 "$VLLM_VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL" \
    --port "$port" --max-model-len 512 --dtype float32 --enforce-eager > "$WORK/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 450); do
    if "$DLTOP_PYTHON" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
            "http://127.0.0.1:$port/v1/models" 2>/dev/null; then break; fi
    kill -0 $pid 2>/dev/null || { tail -20 "$WORK/server.log"; echo "vLLM exited"; exit 2; }
    sleep 2
done

# vllm-cpu 0.32.0's `vllm` command fails (it asks for a distribution named "vllm"): its
# bench module's own parser and main instead
BENCH='import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))'
for i in $(seq 1 "$PAIRS"); do
    # fresh prompts per run; dltop samples its file with replacement: a pool 50x its requests
    cmp prompts "$WORK/prompts-v$i.json" $((2 * i)) "$REQUESTS" "$PROMPT_WORDS"
    cmp prompts "$WORK/prompts-d$i.json" $((2 * i + 1)) $((50 * REQUESTS)) "$PROMPT_WORDS"
    echo "== pair $i: vllm bench serve"
    metrics "$WORK/metrics-v$i.before"
    nice -n 10 "$VLLM_VENV/bin/python" -c "$BENCH" --backend openai \
        --base-url "http://127.0.0.1:$port" --endpoint /v1/completions --model "$MODEL" \
        --dataset-name sharegpt --dataset-path "$WORK/prompts-v$i.json" \
        --sharegpt-output-len "$NEW_TOKENS" --num-prompts "$REQUESTS" --request-rate "$RATE" \
        --max-concurrency "$CONC" --ignore-eos --temperature 0 --seed "$i" \
        --num-warmups "$WARMUP" --save-result --save-detailed --result-dir "$WORK" \
        --result-filename "vllm-$i.json" --percentile-metrics ttft,tpot,itl,e2el \
        --metric-percentiles 50,99 --disable-tqdm > "$WORK/vllm-$i.log" 2>&1 \
        || { tail -20 "$WORK/vllm-$i.log"; exit 2; }
    metrics "$WORK/metrics-v$i.after"
    grep -E "^(Request throughput|Output token throughput|P50|P99)" "$WORK/vllm-$i.log" || true
    echo "== pair $i: dltop"
    metrics "$WORK/metrics-d$i.before"
    cat > "$WORK/dltop-$i.toml" <<TOML
name = "dltop-$i"
[defaults]
frameworks = ["openai"]
mode = "serve"
models = ["$MODEL"]
endpoint = "http://127.0.0.1:$port/v1"
api = "completions"
dataset = "prompts-d$i.json"
new_tokens = $NEW_TOKENS
iterations = $REQUESTS
warmup = $WARMUP
request_rate = $RATE
concurrency = $CONC
force_length = ["ignore_eos"]
seed = $i
timeout_s = 600
[[matrix]]
api = "completions"
TOML
    PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" nice -n 10 "$DLTOP_PYTHON" -m dltop \
        --db "$WORK/vbench.db" run "$WORK/dltop-$i.toml" || exit 2
    metrics "$WORK/metrics-d$i.after"
done
kill -TERM $pid; wait $pid || true; trap - EXIT
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" cmp compare "$WORK" "$PAIRS"
