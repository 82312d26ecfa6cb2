#!/usr/bin/env bash
# A rate sweep with shared prefixes against a real engine's prefix cache, once per
# prompt_draw (docs/serving.md, "Checked against real servers"):
#
#   scripts/serve_prefix_check.sh vllm|sglang [WORKDIR]   # default /tmp/dltop-prefix-ENGINE
#
# Starts the engine by hand on the tiny Llama (scripts/serve_tiny_llama.py) with its
# cache report on (vLLM: --enable-prompt-tokens-details, SGLang: --enable-cache-report),
# then runs two campaigns against it, each a request_rate sweep of one seed with
# prefix_tokens and prefix_groups: prompt_draw = "point", then "seed". Around each it
# reads the engine's /metrics counters; scripts/serve_prefix_check.py prints, per run,
# what the store holds of the cache and, per campaign, the store against the engine's own
# counters, and exits 1 where they disagree or where a "point" run found an earlier
# run's prompts in the cache. The venvs are the ones serve_engine_vllm.sh and
# serve_engine_sglang.sh build (VLLM_VENV, SGLANG_VENV).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENGINE=${1:?vllm or sglang}
WORK=${2:-/tmp/dltop-prefix-$ENGINE}
DLTOP_PYTHON=${DLTOP_PYTHON:-$ROOT/.venv/bin/python}
PREFIX_TOKENS=96
PREFIX_GROUPS=2
export HF_HUB_OFFLINE=1 DLTOP_DEFAULT_MIN_TIME_S=0
dltop() { PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$DLTOP_PYTHON" -m dltop "$@"; }

case $ENGINE in
vllm)
    VENV=${VLLM_VENV:-$HOME/.cache/dltop/vllm-venv}
    export VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind
    # --block-size 32 (its CPU attention takes multiples of 32; 16 fails at start): the cache
    # holds whole blocks, the prefix 3 of them
    command() { echo "$VENV/bin/python -m vllm.entrypoints.openai.api_server --model $1" \
        "--port $2 --max-model-len 512 --dtype float32 --enforce-eager --block-size 32" \
        "--enable-prefix-caching --enable-prompt-tokens-details"; }
    READY=/v1/models ;;
sglang)
    VENV=${SGLANG_VENV:-$HOME/.cache/dltop/sglang-venv}
    export SGLANG_USE_CPU_ENGINE=1
    command() { echo "$VENV/bin/python -m sglang.launch_server --model-path $1 --port $2" \
        "--device cpu --dtype float32 --max-total-tokens 8192 --enable-metrics" \
        "--enable-cache-report"; }
    READY=/health ;;
*) echo "ENGINE: vllm or sglang, not $ENGINE"; exit 2 ;;
esac

mkdir -p "$WORK"
MODEL=$WORK/tiny-llama
[[ -f $MODEL/model.safetensors ]] || "$VENV/bin/python" "$ROOT/scripts/serve_tiny_llama.py" "$MODEL"
port=$("$DLTOP_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
t0=$(date +%s)
# shellcheck disable=SC2046 # the command's words
$(command "$MODEL" "$port") > "$WORK/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
ready=
for _ in $(seq 1 300); do
    if "$DLTOP_PYTHON" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
            "http://127.0.0.1:$port$READY" 2>/dev/null; then ready=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 2
done
if [[ -z $ready ]]; then tail -20 "$WORK/server.log"; echo "$ENGINE not ready"; exit 2; fi
echo "== $ENGINE ready after $(( $(date +%s) - t0 )) s"
db=$WORK/prefix.db
rm -f "$db"
for draw in point seed; do
    cat > "$WORK/$draw.toml" <<EOF
name = "prefix-$draw"
[defaults]
frameworks = ["openai"]
mode = "serve"
models = ["$MODEL"]
endpoint = "http://127.0.0.1:$port/v1"
prompt_tokens = 32
prefix_tokens = $PREFIX_TOKENS
prefix_groups = $PREFIX_GROUPS
new_tokens = 4
iterations = 8
warmup = 2
concurrency = 2
timeout_s = 600
prompt_draw = "$draw"
# the tiny model's EOS often comes first: an unforced answer may hold no token
force_length = ["ignore_eos", "min_tokens"]
[[matrix]]
request_rate = [2, 4, 8]
EOF
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" metrics "$ENGINE" \
        "http://127.0.0.1:$port/metrics" > "$WORK/metrics-$draw-before.txt"
    echo "== dltop run $draw.toml (prompt_draw = \"$draw\")"
    dltop --db "$db" run "$WORK/$draw.toml" || true
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" metrics "$ENGINE" \
        "http://127.0.0.1:$port/metrics" > "$WORK/metrics-$draw-after.txt"
done
kill -TERM $pid; wait $pid || true; trap - EXIT
"$DLTOP_PYTHON" "$ROOT/scripts/serve_prefix_check.py" "$ENGINE" "$db" "$WORK" "$PREFIX_TOKENS" \
    "$PREFIX_GROUPS"
