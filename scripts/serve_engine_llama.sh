#!/usr/bin/env bash
# dltop's serve mode against a real llama.cpp llama-server, CPU only (docs/serving.md,
# "Checked against real servers"):
#
#     scripts/serve_engine_llama.sh
#
# 1. llama-server: the first of $LLAMA_SERVER, `llama-server` on PATH, $LLAMA_BUILD/bin;
#    else built (CPU, the server target only) from $LLAMA_SRC, a llama.cpp source tree;
#    when that is missing too, from the llama.cpp that llama-cpp-python's sdist on PyPI
#    vendors (pip download llama-cpp-python==$LLAMA_PY_VERSION, vendor/llama.cpp).
# 2. A tiny Llama of random weights (2 layers, hidden 64) and a SentencePiece tokenizer
#    trained here on docs/*.md, converted with that tree's convert_hf_to_gguf.py in a venv
#    of its own ($LLAMA_VENV: sentencepiece, beside the project's torch and transformers).
#    Nothing is downloaded but PyPI packages.
# 3. A dltop campaign: `server = "llama-cpp"` (the preset, dltop starts it: PATH must find
#    llama-server) and an endpoint already serving, chat and completions, then
#    `dltop export`; it checks each request's stored figures and exits 1 on a mismatch.
#
# PYTHON: the interpreter with dltop's dependencies (default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo "$ROOT/.venv/bin/python" || command -v python3)}
WORK=${LLAMA_WORK:-/work}
LLAMA_BUILD=${LLAMA_BUILD:-$WORK/llama-build}
LLAMA_VENV=${LLAMA_VENV:-$WORK/llama-venv}
MODEL_DIR=${LLAMA_MODEL_DIR:-$WORK/llama-model}
OUT=${LLAMA_OUT:-$WORK/llama-run}
LLAMA_PY_VERSION=${LLAMA_PY_VERSION:-0.3.36}
JOBS=${JOBS:-2}
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
say() { echo "serve_engine_llama: $*"; }

source_tree() {  # a llama.cpp tree with tools/server and convert_hf_to_gguf.py
    if [ -n "${LLAMA_SRC:-}" ]; then echo "$LLAMA_SRC"; return; fi
    local dir=$WORK/llama-src/llama_cpp_python-$LLAMA_PY_VERSION/vendor/llama.cpp
    if [ ! -f "$dir/convert_hf_to_gguf.py" ]; then
        say "source: llama-cpp-python $LLAMA_PY_VERSION's sdist from PyPI (vendor/llama.cpp)" >&2
        mkdir -p "$WORK/llama-src"
        "$PY" -m pip download -q --no-deps --no-binary :all: -d "$WORK/llama-src" \
            "llama-cpp-python==$LLAMA_PY_VERSION" >&2
        tar xzf "$WORK/llama-src/llama_cpp_python-$LLAMA_PY_VERSION.tar.gz" -C "$WORK/llama-src"
    fi
    echo "$dir"
}

SRC=$(source_tree)
SERVER=${LLAMA_SERVER:-$(command -v llama-server || true)}
if [ -z "$SERVER" ] && [ -x "$LLAMA_BUILD/bin/llama-server" ]; then
    SERVER=$LLAMA_BUILD/bin/llama-server
fi
if [ -z "$SERVER" ]; then
    command -v cmake >/dev/null && command -v g++ >/dev/null || {
        say "cmake and g++ are needed to build llama-server (apt-get install -y cmake g++)"
        exit 2; }
    say "building llama-server from $SRC into $LLAMA_BUILD (-j$JOBS)"
    t0=$(date +%s)
    # no network at build time: no curl, no TLS, no prebuilt web UI fetched
    nice -n 10 cmake -S "$SRC" -B "$LLAMA_BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
        > "$LLAMA_BUILD.cmake.log" 2>&1
    nice -n 10 cmake --build "$LLAMA_BUILD" --target llama-server -j"$JOBS" \
        > "$LLAMA_BUILD.build.log" 2>&1 || { tail -30 "$LLAMA_BUILD.build.log"; exit 1; }
    say "built in $(( $(date +%s) - t0 )) s"
    SERVER=$LLAMA_BUILD/bin/llama-server
fi
say "llama-server: $SERVER ($("$SERVER" --version 2>&1 | grep -m1 version || true))"

GGUF=$MODEL_DIR/tiny-llama.gguf
if [ ! -f "$GGUF" ]; then
    if [ ! -x "$LLAMA_VENV/bin/python" ]; then
        # the converter's venv sees the project's packages (torch, transformers, numpy)
        # through a .pth; only sentencepiece is installed into it
        "$PY" -m venv "$LLAMA_VENV"
        "$PY" -c 'import site; print(site.getsitepackages()[0])' > "$("$LLAMA_VENV/bin/python" \
            -c 'import site; print(site.getsitepackages()[0])')/dltop-venv.pth"
        "$LLAMA_VENV/bin/pip" install -q sentencepiece
    fi
    say "making the tiny model in $MODEL_DIR"
    "$LLAMA_VENV/bin/python" - "$MODEL_DIR/hf" "$ROOT/docs" <<'EOF'
import glob, json, os, sys
import sentencepiece as spm
import torch
from transformers import LlamaConfig, LlamaForCausalLM
out, corpus_dir = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
text = os.path.join(out, "corpus.txt")
with open(text, "w", encoding="utf-8") as fh:
    for path in sorted(glob.glob(os.path.join(corpus_dir, "**", "*.md"), recursive=True)):
        with open(path, encoding="utf-8") as src:
            fh.write(src.read())
# BPE with byte fallback: any text tokenizes; ids 0-2 are <unk>, <s>, </s>
spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(out, "tokenizer"),
    vocab_size=1000, model_type="bpe", character_coverage=1.0, byte_fallback=True,
    unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
os.remove(text)
os.remove(os.path.join(out, "tokenizer.vocab"))
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
LlamaForCausalLM(cfg).save_pretrained(out)
template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
with open(os.path.join(out, "tokenizer_config.json"), "w") as fh:
    json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
               "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 4096,
               "chat_template": template}, fh)
EOF
    PYTHONPATH="$SRC/gguf-py" "$LLAMA_VENV/bin/python" "$SRC/convert_hf_to_gguf.py" \
        "$MODEL_DIR/hf" --outfile "$GGUF" --outtype f32 > "$MODEL_DIR/convert.log" 2>&1 \
        || { tail -20 "$MODEL_DIR/convert.log"; exit 1; }
fi
say "model: $GGUF"

mkdir -p "$OUT"
# PATH finds the built llama-server, as the llama-cpp preset's command needs
export PATH="$(dirname "$SERVER"):$PATH" DLTOP_DEFAULT_MIN_TIME_S=0
exec "$PY" - "$SERVER" "$GGUF" "$OUT" <<'EOF'
"""Probe llama-server by hand, run the dltop campaign, check what dltop stored."""
import json, os, socket, sqlite3, subprocess, sys, time, urllib.error, urllib.request
from http.client import HTTPConnection, HTTPException

server, gguf, out = sys.argv[1:4]
PROMPT, NEW, N, WARM = 24, 16, 12, 2
bad = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        bad.append(what)


def port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, key=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def start(p, log, *extra):
    return subprocess.Popen([server, "-m", gguf, "--port", str(p), *extra], stdout=log,
                            stderr=subprocess.STDOUT)


def ready(p, proc):
    for _ in range(600):
        try:
            if http(f"http://127.0.0.1:{p}/health")[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with status {proc.returncode}")
        time.sleep(0.1)


def stream(url, body):
    """(content chunks, the usage, finish reasons) of a streamed answer."""
    req = urllib.request.Request(url, data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    chunks, usage, finish = 0, None, []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            obj = json.loads(line[6:])
            usage = obj.get("usage") or usage
            for c in obj.get("choices") or []:
                if (c.get("delta") or {}).get("content") or c.get("text"):
                    chunks += 1
                if c.get("finish_reason"):
                    finish.append(c["finish_reason"])
    return chunks, usage, finish


print("== llama-server answered by hand")
p = port()
base = f"http://127.0.0.1:{p}"
with open(os.path.join(out, "probe-server.log"), "w") as log:
    proc = start(p, log)
    seen = {"/health": [], "/v1/models": []}
    t0 = time.monotonic()
    try:  # every status each readiness URL answers from the start until both say 200
        while time.monotonic() - t0 < 120:
            for path, codes in seen.items():
                try:
                    code = http(base + path)[0]
                except OSError:
                    code = "refused"
                if not codes or codes[-1] != code:
                    codes.append(code)
            if all(c and c[-1] == 200 for c in seen.values()):
                break
            time.sleep(0.002)
        print("  readiness, statuses in turn:", json.dumps(seen))
        check(seen["/health"][-1] == 200, "/health answers 200 once loaded")
        chat = {"model": "m", "messages": [{"role": "user", "content": "the and of"}],
                "max_tokens": NEW, "temperature": 0, "stream_options": {"include_usage": True}}
        comp = {"model": "m", "prompt": "the and of", "max_tokens": NEW, "temperature": 0,
                "stream_options": {"include_usage": True}}
        for api, url, body in (("chat", "/v1/chat/completions", chat),
                               ("completions", "/v1/completions", comp)):
            chunks, usage, finish = stream(base + url, body)
            print(f"  {api}: {chunks} content chunks, usage {usage}, finish {finish}")
            # chat's parser may hold a token's text back into the next chunk: fewer chunks
            check(isinstance(usage, dict) and usage.get("completion_tokens") == NEW
                  and 0 < chunks <= NEW, f"{api}: usage.completion_tokens in the stream")
        code, text = http(base + "/tokenize", {"model": "m", "prompt": "the and of",
                                                 "add_special_tokens": False})
        print(f"  /tokenize with vLLM's body: {code} {text}")
        code, text = http(base + "/tokenize", {"content": "the and of", "add_special": False})
        print(f"  /tokenize with its own body: {code} {text}")
        check(code == 200 and len(json.loads(text)["tokens"]) > 0, "/tokenize {content}")
        code, text = http(base + "/v1/completions", dict(comp, bogus_field=1, stream=False))
        print(f"  an unknown field: {code} {text[:120]}")
        eos = dict(comp, logit_bias={"2": 100})  # </s> (id 2) first whatever the weights
        for ignore in (False, True):
            chunks, usage, finish = stream(base + "/v1/completions", dict(eos, ignore_eos=ignore))
            n = (usage or {}).get("completion_tokens")
            print(f"  </s> biased first, ignore_eos={ignore}: {n} tokens, finish {finish}")
            check((n == NEW) == ignore, f"ignore_eos={ignore} {'forces' if ignore else 'lets'} "
                  "the length")
        chunks, usage, finish = stream(base + "/v1/completions", dict(eos, min_tokens=NEW))
        print(f"  </s> biased first, min_tokens={NEW}: {(usage or {}).get('completion_tokens')}"
              f" tokens, finish {finish}")
        conn = HTTPConnection("127.0.0.1", p, timeout=30)
        for i in range(2):  # two streams on one connection, as a client's pool reuses it
            try:
                conn.request("POST", "/v1/completions", json.dumps(dict(comp, stream=True)),
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                print(f"  stream {i + 1} on one connection: {r.status}, Keep-Alive: "
                      f"{r.getheader('Keep-Alive')}, Connection: {r.getheader('Connection')}")
            except (HTTPException, OSError) as exc:
                print(f"  stream {i + 1} on one connection: {type(exc).__name__} (it closed "
                      "the connection after the first stream)")
            time.sleep(0.05)
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
    p = port()
    proc = start(p, log, "--api-key", "k3y")
    try:
        ready(p, proc)
        codes = {u: http(f"http://127.0.0.1:{p}{u}")[0] for u in ("/health", "/v1/models")}
        print(f"  with --api-key, no key sent: {codes}")
        check(codes == {"/health": 200, "/v1/models": 401}, "/health public, /v1/models not")
    finally:
        proc.terminate()
        proc.wait(10)
    for threads in ((), ("-t", "1")):  # its default: the host's cores
        p = port()
        proc = start(p, log, *threads)
        try:
            ready(p, proc)
            ms = []
            for _ in range(3):
                doc = json.loads(http(f"http://127.0.0.1:{p}/v1/completions",
                                      dict(comp, stream=False, max_tokens=32))[1])
                ms.append(round(doc["timings"]["predicted_per_token_ms"], 2))
            print(f"  threads {' '.join(threads) or 'default'}: ms per output token {ms}")
        finally:
            proc.terminate()
            proc.wait(10)

print("== the dltop campaign")
db = os.path.join(out, "llama.db")
for f in (db, db + "-wal", db + "-shm"):
    if os.path.exists(f):
        os.remove(f)
ep = port()
profile = os.path.join(out, "llama.toml")
common = f"""frameworks = ["openai"]
mode = "serve"
prompt_tokens = {PROMPT}
new_tokens = {NEW}
iterations = {N}
warmup = {WARM}
timeout_s = 300
"""
plan = []  # (api, how served) of each run, in the campaign's order
with open(profile, "w") as fh:
    # the preset as it is, the same with one thread (a table), and an endpoint serving
    fh.write('name = "llama-cpp-check"\n[servers.llama-cpp-t1]\n'
             'command = "llama-server -m {model} --port {port} -t 1"\n'
             'ready_url = "http://{host}:{port}/health"\nextensions = ["ignore_eos"]\n')
    for api in ("chat", "completions"):
        for name, conc in (("llama-cpp", 1), ("llama-cpp-t1", 4)):
            fh.write(f'\n[[matrix]]\n{common}models = ["{gguf}"]\nserver = "{name}"\n'
                     f'api = "{api}"\nconcurrency = {conc}\n')
            plan.append((api, f"server {name}, concurrency {conc}"))
        fh.write(f'\n[[matrix]]\n{common}models = ["tiny"]\n'
                 f'endpoint = "http://127.0.0.1:{ep}/v1"\nforce_length = ["ignore_eos"]\n'
                 f'api = "{api}"\n')
        plan.append((api, "endpoint serving (-t 1)"))
with open(os.path.join(out, "endpoint-server.log"), "w") as log:
    proc = start(ep, log, "-t", "1")
    try:
        ready(ep, proc)
        t = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "dltop", "--db", db, "run", profile])
        print(f"  dltop run: exit {res.returncode} in {time.monotonic() - t:.0f} s")
        check(res.returncode == 0, "dltop run exits 0")
    finally:
        proc.terminate()
        proc.wait(10)
subprocess.run([sys.executable, "-m", "dltop", "--db", db, "export", "--table", "summary"])

con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
con.row_factory = sqlite3.Row
runs = con.execute("select r.id, r.status, r.token_source, r.length_forced, r.short_requests, "
                   "r.server_cold_start_s, j.position from runs r join jobs j on "
                   "j.id = r.job_id order by j.position").fetchall()
check(len(runs) == len(plan), f"{len(plan)} runs stored (got {len(runs)})")
for r in runs:
    api, how = plan[r["position"]]
    name = f"run {r['id']} ({api}, {how})"
    check(r["status"] == "ok", f"{name}: status {r['status']}")
    check(r["token_source"] == "usage", f"{name}: tokens from usage ({r['token_source']})")
    check((r["length_forced"], r["short_requests"]) == (1, 0),
          f"{name}: lengths forced, none short ({r['length_forced']}, {r['short_requests']})")
    reqs = con.execute("select status, error, output_tokens, tokens_estimated, prompt_tokens, "
                       "ttft_s, e2e_s from serve_requests where run_id = ?", (r["id"],)).fetchall()
    check(len(reqs) == N + WARM, f"{name}: {N + WARM} requests stored")
    check(all(q["status"] == 200 and q["error"] is None for q in reqs), f"{name}: all 200")
    check({q["output_tokens"] for q in reqs} == {NEW}, f"{name}: output tokens exactly "
          f"{NEW} ({sorted({q['output_tokens'] for q in reqs})})")
    check(not any(q["tokens_estimated"] for q in reqs), f"{name}: none estimated")
    prompts = sorted({q["prompt_tokens"] for q in reqs})
    # completions: the prompt and the BOS llama-server adds; chat: the template's too
    want = PROMPT + 1 if api == "completions" else None
    check((want is None or prompts == [want]) and prompts[0] > PROMPT,
          f"{name}: prompt tokens by usage {prompts} (prompt_tokens {PROMPT})")
    check(all(q["ttft_s"] is not None and 0 < q["ttft_s"] <= q["e2e_s"] < 60 for q in reqs),
          f"{name}: 0 < TTFT <= e2e")
    if how.startswith("server"):  # each is its group's first run: a cold start each
        check(0 < (r["server_cold_start_s"] or 0) < 300,
              f"{name}: cold start {r['server_cold_start_s']} s stored")
print("mismatches:", len(bad))
sys.exit(1 if bad else 0)
EOF
