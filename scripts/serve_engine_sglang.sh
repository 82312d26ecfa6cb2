#!/usr/bin/env bash
# dltop's serve mode against a real SGLang on CPU, checked field by field (issue 41;
# docs/serving.md, "Checked against real servers"). On a fresh machine:
#
#   scripts/serve_engine_sglang.sh [WORKDIR]      # default /tmp/dltop-serve-sglang
#
# 1. builds the venv SGLANG_VENV (default ~/.cache/dltop/sglang-venv) when it has no
#    SGLang: python3.11 -m venv, torch==$TORCH_VERSION (a CPU torch pip finds: PyPI's
#    default torch is CUDA's, gigabytes), sglang==$SGLANG_VERSION without its
#    dependencies, then those of them that a CPU text model needs (its METADATA less
#    SKIP: CUDA kernels, CUDA torch pins, audio/vision decoders). Two workarounds, both
#    written into the venv and named in docs/serving.md:
#    - PyPI's torchvision links CUDA torch (libtorch_cuda.so): its C++ ops cannot load
#      beside a CPU torch and its fake-op registrations then fail at import. SGLang
#      imports torchvision.transforms at start (multimodal configs), so the
#      registrations are skipped where the ops did not load.
#    - sgl-kernel's CPU ops are built from SGLang's source tree (sgl-kernel/, CMake);
#      PyPI has CUDA builds only. SGLang imports names from sgl_kernel at module level;
#      on a CPU without AMX it says "using torch native backend" and its layers take
#      their torch paths. An `sgl_kernel` module whose every op raises, naming itself,
#      stands in: a request served proves none was called.
# 2. saves a tiny random-weight Llama (2 layers, a word-level tokenizer that adds a BOS)
#    with save_pretrained: no download;
# 3. asks the server by hand what dltop relies on, runs a dltop campaign that starts the
#    server itself ([servers.sglang-cpu]), then one against the same server already
#    serving; prints `dltop export`;
# 4. checks what was stored (and SGLang's own /metrics counters) and exits 1 on a
#    mismatch (2: could not run at all).
#
# DLTOP_PYTHON: the interpreter that runs dltop (default: this checkout's .venv, else
# python3), this checkout's src/ first on its path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/dltop-serve-sglang}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCHVISION_VERSION=${TORCHVISION_VERSION:-0.28.0}
SGLANG_VENV=${SGLANG_VENV:-$HOME/.cache/dltop/sglang-venv}
if [[ -z ${DLTOP_PYTHON:-} ]]; then
    if [[ -x $ROOT/.venv/bin/python ]]; then DLTOP_PYTHON=$ROOT/.venv/bin/python
    else DLTOP_PYTHON=python3; fi
fi
NEW_TOKENS=8
PROMPT_TOKENS=16
# sglang 0.5.23's requirements that a CPU text model does without (CUDA kernels and
# their pins, CUDA torch's companions, vision and audio decoders); torch and torchvision
# are installed apart, pinned to the CPU torch
SKIP="apache-tvm-ffi av cuda-python decord2 deepseek-recipe flash-attn-4 flashinfer_python
humming-kernels kernels nvidia-cutlass-dsl nvidia-mathdx nvshmem4py-cu13 quack-kernels
sgl-deep-ep sgl-deep-gemm sgl-flash-mla sglang-kernel tilelang timm tml-renderers torch
torchaudio torchcodec torchvision"

dltop() { PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" DLTOP_DEFAULT_MIN_TIME_S=0 \
    "$DLTOP_PYTHON" -m dltop "$@"; }

# SGLang's CPU engine is chosen by this variable, not by --device alone (is_cpu());
# nothing is downloaded
export SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1

sglang_venv() {
    if "$SGLANG_VENV/bin/python" -c "import sglang, sgl_kernel, torchvision" 2>/dev/null; then
        return; fi
    local py t0 pip site
    py=$(command -v python3.11 || command -v python3)
    t0=$(date +%s)
    echo "== building $SGLANG_VENV (sglang==$SGLANG_VERSION, torch==$TORCH_VERSION) with $py"
    "$py" -m venv "$SGLANG_VENV"
    pip="$SGLANG_VENV/bin/pip"
    echo "torch==$TORCH_VERSION" > "$SGLANG_VENV/pin.txt"
    nice -n 10 "$pip" install -q "torch==$TORCH_VERSION"
    nice -n 10 "$pip" install -q --no-deps "sglang==$SGLANG_VERSION" \
        "torchvision==$TORCHVISION_VERSION"
    "$SGLANG_VENV/bin/python" - "$SKIP" > "$SGLANG_VENV/deps.txt" <<'EOF'
import re, sys
from importlib.metadata import requires
skip = {s.lower().replace("_", "-") for s in sys.argv[1].split()}
for req in requires("sglang"):
    name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower().replace("_", "-")
    if ";" not in req and name not in skip:  # extras and platform pins carry a marker
        print(req)
EOF
    nice -n 10 "$pip" install -q -c "$SGLANG_VENV/pin.txt" -r "$SGLANG_VENV/deps.txt"
    site=$("$SGLANG_VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')
    for m in _meta_registrations _autograd_registrations; do
        [[ -f $site/torchvision/${m}_impl.py ]] || mv "$site/torchvision/$m.py" \
            "$site/torchvision/${m}_impl.py"
        printf '%s\nfrom .extension import _has_ops\n\nif _has_ops():\n    from . import %s_impl  # noqa: F401\n' \
            "# dltop serve_engine_sglang.sh: PyPI's torchvision links CUDA torch; no ops here" \
            "$m" > "$site/torchvision/$m.py"
    done
    mkdir -p "$site/sgl_kernel"
    cat > "$site/sgl_kernel/__init__.py" <<'EOF'
"""Stands in for sgl-kernel's CPU build (dltop's scripts/serve_engine_sglang.sh).

SGLang imports names from sgl_kernel at module level; on a CPU without AMX its layers
take their torch-native paths. Every op called here raises, naming itself.
"""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def op(*args, **kwargs):
        raise RuntimeError("sgl_kernel.%s called: sgl-kernel's CPU ops are not built" % name)

    op.__name__ = name
    return op
EOF
    "$SGLANG_VENV/bin/python" -c "import sglang.srt.entrypoints.http_server" >/dev/null
    echo "== SGLang installed in $(( $(date +%s) - t0 )) s"
}

sglang_model() {  # $1: the folder (the vLLM script's tiny Llama)
    [[ -f $1/model.safetensors ]] && return
    "$SGLANG_VENV/bin/python" "$ROOT/scripts/serve_tiny_llama.py" "$1"
}

sglang_command() {  # $1: model, $2: port
    # --max-total-tokens: its default KV cache is most of free memory (14.6 GiB here, 32 s
    # to allocate); --enable-metrics: /metrics answers 404 without it
    echo "$SGLANG_VENV/bin/python -m sglang.launch_server --model-path $1 --port $2" \
        "--device cpu --dtype float32 --max-total-tokens 8192 --enable-metrics"
}

sglang_profile_head() {  # the keys both campaigns share
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

sglang_by_hand() {  # $1: port; what dltop relies on, printed
    "$DLTOP_PYTHON" - "$1" "$MODEL" <<'EOF'
import json, sys, urllib.error, urllib.request
port, model = sys.argv[1], sys.argv[2]
prompt = "the of and to in is that for it as with was on be at by"

def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

for api, body in (("chat", {"messages": [{"role": "user", "content": prompt}]}),
                  ("completions", {"prompt": prompt})):
    body.update(model=model, max_tokens=4, stream=True, ignore_eos=True, min_tokens=4,
                stream_options={"include_usage": True})
    status, text = post("/v1/%s" % ("chat/completions" if api == "chat" else api), body)
    events = [json.loads(line[6:]) for line in text.splitlines()
              if line.startswith("data: {")]
    first = events[0]["choices"][0] if events and events[0]["choices"] else {}
    print("%s: HTTP %d, %d events; first choice %s; last %s" % (
        api, status, len(events), json.dumps(first.get("delta", first.get("text"))),
        json.dumps({k: events[-1].get(k) for k in ("choices", "usage")})))
for body in ({"model": model, "prompt": prompt, "add_special_tokens": False},
             {"model": model, "prompt": prompt}, {"content": prompt}):
    print("/tokenize %s: %s" % (sorted(body), post("/tokenize", body)[1][:100]))
status, _ = post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 2,
                                     "no_such_field": 1})
print("an unknown request field: HTTP %d" % status)
for path in ("/v1/models", "/health", "/metrics"):
    try:
        code = urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path),
                                      timeout=10).status
    except urllib.error.HTTPError as e:
        code = e.code
    print("GET %s: HTTP %d" % (path, code))
EOF
}

engine_sglang() {
    sglang_venv
    MODEL=$WORK/tiny-llama
    sglang_model "$MODEL"
    local db=$WORK/sglang.db port pid t0 ready
    rm -f "$db"
    # 1. dltop starts the server (one group: chat, completions, unforced, then a request
    #    over the context that SGLang refuses, which fails its run last)
    { echo 'name = "sglang-started"'; sglang_profile_head; cat <<EOF
[servers.sglang-cpu]
command = "$(sglang_command '{model}' '{port}')"
ready_url = "http://{host}:{port}/health"
timeout_s = 900
extensions = ["ignore_eos", "min_tokens"]

[[matrix]]
server = "sglang-cpu"
api = "chat"
[[matrix]]
server = "sglang-cpu"
api = "completions"
[[matrix]]
server = "sglang-cpu"
api = "completions"
new_tokens = 48
force_length = []
max_error_rate = 0.5
[[matrix]]
server = "sglang-cpu"
new_tokens = 600
iterations = 2
warmup = 0
EOF
    } > "$WORK/sglang-started.toml"
    echo "== dltop run sglang-started.toml (dltop starts SGLang)"
    dltop --db "$db" run "$WORK/sglang-started.toml" || true
    # 2. an endpoint already serving: started here, its start-to-ready timed (/health:
    #    503 until SGLang's own warm-up request is done; /v1/models answers before)
    port=$("$DLTOP_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    t0=$(date +%s.%N)
    # shellcheck disable=SC2046 # the command's words
    $(sglang_command "$MODEL" "$port") > "$WORK/sglang-endpoint.log" 2>&1 &
    pid=$!
    trap "kill -TERM $pid 2>/dev/null || true" EXIT
    ready=
    for _ in $(seq 1 450); do
        if "$DLTOP_PYTHON" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
                "http://127.0.0.1:$port/health" 2>/dev/null; then ready=1; break; fi
        kill -0 $pid 2>/dev/null || break
        sleep 2
    done
    if [[ -z $ready ]]; then tail -20 "$WORK/sglang-endpoint.log"; echo "SGLang not ready"; return 2; fi
    echo "== SGLang ready after $("$DLTOP_PYTHON" -c "import sys,time; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0") s (start to /health answering 200)"
    echo "== asked by hand"
    sglang_by_hand "$port"
    { echo 'name = "sglang-endpoint"'; sglang_profile_head; cat <<EOF
endpoint = "http://127.0.0.1:$port/v1"
force_length = ["ignore_eos", "min_tokens"]
[[matrix]]
api = "chat"
[[matrix]]
api = "completions"
EOF
    } > "$WORK/sglang-endpoint.toml"
    echo "== dltop run sglang-endpoint.toml (SGLang already serving)"
    sglang_metrics "$port" > "$WORK/metrics-before.txt"
    dltop --db "$db" run "$WORK/sglang-endpoint.toml" || true
    sglang_metrics "$port" > "$WORK/metrics-after.txt"
    kill -TERM $pid; wait $pid || true; trap - EXIT
    dltop --db "$db" export --campaign all --table summary || true
    sglang_check "$db" "$WORK/metrics-before.txt" "$WORK/metrics-after.txt"
}

sglang_metrics() {  # SGLang's own counters (Prometheus text at /metrics), summed over labels
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" metrics sglang \
        "http://127.0.0.1:$1/metrics"
}

sglang_check() {  # what was stored, against what SGLang 0.5.23 (CPU) does; exit 1 on a mismatch
    "$DLTOP_PYTHON" "$ROOT/scripts/serve_engine_check.py" check sglang "$1" "$PROMPT_TOKENS" \
        "$NEW_TOKENS" "$2" "$3"
}

mkdir -p "$WORK"
engine_sglang
