"""A streaming OpenAI-compatible server with a known schedule, for the serve tests
(issue 41). Real HTTP on 127.0.0.1 (aiohttp.web), on ``--port`` (default an ephemeral
one), printed as ``PORT <n>`` once it listens, after a first line ``PID <pid> PPID
<ppid> PGID <pgid>``; ``GET /v1/models`` answers once it listens (readiness).

Each response's first content token comes ``--ttft-ms`` after the request, then a
chunk every ``--itl-ms``; ``max_tokens`` tokens, each the text ``"tok "`` (4
characters). The served model's name picks what the edges look like:

- ``steady``: one token per chunk; a chat stream opens with a role-only chunk (its
  ``content`` empty, as vLLM's) and
  ends with a usage-only chunk and ``[DONE]``; SSE comments between events; every
  content event's JSON written in two pieces 1 ms apart, the second on schedule
  (split across reads);
- ``multi``: three tokens per chunk (the last chunk the rest);
- ``nousage``: as steady without the usage chunk (tokens must be estimated);
- ``http429``: status 429 with a JSON error, no stream;
- ``nostream``: ``stream: true`` ignored: one ``chat.completion`` JSON answer, status 200;
- ``error500``: two chunks, then an error event (a 500 inside the stream);
- ``reset``: two chunks, then the connection is reset;
- ``stall``: two chunks, then nothing;
- ``hang``: the request read, then nothing at all (not even the status line);
- ``malformed``: two chunks, then a line that is not JSON (with an ESC byte);
- ``flaky``: every third request as ``error500``, the others as ``steady``;
- ``auth``: as steady with ``Authorization: Bearer s3cret``, else status 401 quoting the
  ``Authorization`` it got;
- ``edges``: the Nth request as the Nth of ``http429``, ``error500``, ``reset``,
  ``malformed`` and ``stall``, in turn.

Output lengths, as real servers treat the fields that force them: with ``--eos-after
N`` the model meets its end of sequence after N tokens (``finish_reason`` "stop") unless
the request's ``ignore_eos`` is true or its ``min_tokens`` is larger (with ``--eos-token``
the EOS is then a token of its own, as vLLM's: a chunk without text, counted in usage), of
the fields in ``--accepts`` (default both, as vLLM and SGLang; ``""``: neither). A field it does not
accept is ignored (as TGI's OpenAI routes do), or with ``--refuse-unknown`` answered 422
``{"detail": "Unexpected fields in the request: {'ignore_eos'}"}``, as ``transformers
serve`` answers.

With ``--bos 1`` the usage's ``prompt_tokens`` is one above the prompt's words (a BOS, as
vLLM counts it). With ``--tokenize`` it also answers ``POST /tokenize`` as vLLM does
(``{model, prompt}`` → ``{count, tokens}``), a token being a whitespace-separated word; with
``--tokenize llama.cpp`` as llama.cpp 0c1e570 llama-server answered, recorded 2026-11-29:
``{content}`` → ``{tokens}``, and a body without ``content`` (vLLM's) → ``{"tokens": []}``,
status 200; with ``--tokenize tgi`` as TGI's router answers (its source, 2026-01): ``{inputs}``
→ a list of ``{id, text, start, stop}`` led by a BOS that covers no character, and a body
without ``inputs`` → 422.
With ``--api-key KEY`` every route but ``GET /health`` answers 401 without ``Authorization:
Bearer KEY``, as llama.cpp 0c1e570 llama-server answered, recorded 2026-11-29 (its
``/v1/models`` too: a readiness poll without the key never sees it ready).
With ``--warm-up-s S`` its ``/health`` answers 503 for S seconds after it listens while
``/v1/models`` answers at once, as SGLang 0.5.23 (CPU) did while its own warm-up request
ran, recorded 2026-11-29.
With ``--close-after-stream`` it closes each connection once a stream is written, its
headers saying nothing of it (keep-alive), as llama.cpp 0c1e570 llama-server did,
recorded 2026-11-29: a client taking that connection from its pool meets the close.
With ``--hold`` each answer's events, made on schedule, are written in one piece once the
last is made (``[DONE]`` included): the client reads them together, as a client process
that did not run while the server wrote them does.
With ``--context N SHAPE`` it states a context of N tokens, as vLLM and SGLang do
(``vllm``: ``max_model_len`` in each ``/v1/models`` card), llama-server 0c1e570 did,
recorded 2026-11-29 (``llama.cpp``: the card's ``meta.n_ctx``) or TGI's router does (``tgi``:
``GET /info``'s ``max_total_tokens``, ``max_input_tokens`` one less), and answers a request
whose prompt's words and ``max_tokens`` are over N with a 400.
With ``--tls CERT KEY`` it serves HTTPS (``tests/programs/tls``: a self-signed
certificate for localhost and 127.0.0.1, valid until 2126).
With ``--serial`` it answers one request at a time, in arrival order (a one-slot server):
a request's schedule starts when the one before it has ended, so its TTFT grows with the
queue before it and a rate above what it serves misses a TTFT SLO.
With ``--log FILE`` each completion request's prompt is appended to FILE as a JSON line. With
``--timeline FILE`` each streamed request appends ``{"t0": ..., "content_s": [...]}``:
when its handler started and when each content event's last byte was written, in
seconds after it (what the server really did: on a loaded machine its sleeps overshoot
the schedule, and a timing test compares the client with this, not with the schedule).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time

from aiohttp import web

COUNT = {"n": 0}
EDGES = ("http429", "error500", "reset", "malformed", "stall")


def chunk(api: str, text: str | None, *, role: bool = False, finish: str | None = None,
          usage: dict[str, int] | None = None) -> bytes:
    if usage is not None:
        obj: dict[str, object] = {"id": "x", "object": "chunk", "choices": [], "usage": usage}
    elif api == "chat":
        # the role chunk's empty content: as vLLM 0.32 (CPU) answered, recorded 2026-11-29
        delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {}
        if text is not None:
            delta["content"] = text
        obj = {"id": "x", "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    else:
        obj = {"id": "x", "object": "text_completion",
               "choices": [{"index": 0, "text": text or "", "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Held:
    """``--hold``: a stream's writes kept, to be written in one piece at its end."""

    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        self.data += data


async def split_write(resp: web.StreamResponse | Held, data: bytes, due: float) -> float:
    """One SSE event in two writes, the second at ``due`` (monotonic) and the first 1 ms
    before: the client must join them, and sees the event complete on schedule. Returns
    when the second write was made."""
    half = len(data) // 2
    await asyncio.sleep(max(0.0, due - 0.001 - time.monotonic()))
    await resp.write(data[:half])
    await asyncio.sleep(max(0.0, due - time.monotonic()))
    written = time.monotonic()
    await resp.write(data[half:])
    return written


async def complete(request: web.Request) -> web.StreamResponse:
    t0 = time.monotonic()
    body = await request.json()
    api = "chat" if request.path.endswith("/chat/completions") else "completions"
    model = str(body.get("model"))
    COUNT["n"] += 1
    if model == "flaky":
        model = "error500" if COUNT["n"] % 3 == 0 else "steady"
    elif model == "edges":
        model = EDGES[(COUNT["n"] - 1) % len(EDGES)]
    if model == "auth":
        if request.headers.get("Authorization") != "Bearer s3cret":
            # the key it got quoted back, as some proxies' and servers' 401s do
            got = request.headers.get("Authorization", "no key")
            return web.json_response({"error": {"message": f"invalid: {got}", "code": 401}},
                                     status=401)
        model = "steady"
    if model == "hang":
        await asyncio.sleep(3600)
    if model == "http429":
        return web.json_response({"error": {"message": "rate limited", "code": 429}},
                                 status=429)
    if model == "nostream":
        return web.json_response({"object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": "tok tok"},
            "finish_reason": "stop"}], "usage": {"prompt_tokens": 4, "completion_tokens": 2}})
    cfg = request.app["cfg"]
    accepts = {f for f in cfg.accepts.split(",") if f}
    unknown = {f for f in ("ignore_eos", "min_tokens") if f in body} - accepts
    if unknown and cfg.refuse_unknown:
        return web.json_response(
            {"detail": f"Unexpected fields in the request: {unknown}"}, status=422)
    tokens = int(body.get("max_tokens") or 16)
    asked = tokens
    prompt = body["messages"][0]["content"] if api == "chat" else body["prompt"]
    if cfg.context and len(prompt.split()) + tokens > cfg.context:
        return web.json_response({"error": {"message": "over the context", "code": 400}},
                                 status=400)
    if cfg.eos_after and not ("ignore_eos" in accepts and body.get("ignore_eos") is True):
        floor = int(body.get("min_tokens") or 0) if "min_tokens" in accepts else 0
        tokens = min(tokens, max(cfg.eos_after, floor))
    per = 3 if model == "multi" else 1
    # the EOS as a token of its own, after the words (vLLM's way: see --eos-token)
    eos = cfg.eos_token and tokens < asked
    if cfg.log:
        cfg.log.write(json.dumps({"prompt": prompt}) + "\n")
        cfg.log.flush()
    if api == "chat" and cfg.system:  # the template's system prompt, before the user's
        prompt = " ".join(["system"] * cfg.system) + " " + prompt
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    out = Held() if cfg.hold else resp
    if api == "chat":
        await out.write(chunk(api, None, role=True))  # role-only: not a token
    await out.write(b": keep-alive comment\n\n")
    sent, k = 0, 0
    content_s: list[float] = []
    while sent < tokens:
        due = t0 + cfg.ttft_ms / 1000.0 + k * cfg.itl_ms / 1000.0
        n = min(per, tokens - sent)
        last = sent + n >= tokens
        text = "" if k in cfg.textless else "tok " * n
        content_s.append(await split_write(
            out, chunk(api, text, finish=("length" if sent + n >= int(
                body.get("max_tokens") or 16) else "stop") if last and not eos else None),
            due) - t0)
        sent += n
        k += 1
        if k == 2 and model in ("error500", "reset", "stall", "malformed"):
            if model == "error500":
                await out.write(b'data: {"error": {"message": "boom", "code": 500}}\n\n')
                return resp
            if model == "reset":
                assert request.transport is not None
                request.transport.abort()
                return resp
            if model == "malformed":
                await out.write(b"data: {not json \x1b[31m\n\n")
                return resp
            await asyncio.sleep(3600)
        if k % 4 == 0:
            await out.write(b": ping\n\n")
    if eos:  # one step later, no text, counted in usage
        await asyncio.sleep(max(0.0, t0 + cfg.ttft_ms / 1000.0 + k * cfg.itl_ms / 1000.0
                                - time.monotonic()))
        await out.write(chunk(api, "", finish="stop"))
        sent += 1
    if model != "nousage":
        counted = len(prompt.split()) + cfg.bos
        usage: dict[str, object] = {"prompt_tokens": counted, "completion_tokens": sent,
                                    "total_tokens": counted + sent}
        if cfg.prefix_cache:
            usage["prompt_tokens_details"] = {"cached_tokens": cached(request.app, prompt)}
        await out.write(chunk(api, None, usage=usage))
    await out.write(b"data: [DONE]\n\n")
    if isinstance(out, Held):
        await resp.write(bytes(out.data))
    if cfg.close_after_stream:
        await resp.write_eof()
        assert request.transport is not None
        request.transport.close()
    if cfg.timeline:
        cfg.timeline.write(json.dumps({"t0": t0, "content_s": content_s}) + "\n")
        cfg.timeline.flush()
    return resp


def cached(app: web.Application, prompt: str) -> int:
    """A prefix cache's hit, as vLLM's usage reports it: the longest run of words this
    prompt shares from its start with an earlier one (a word a token, as /tokenize counts;
    no block rounding), never the whole prompt (its last token is always computed)."""
    words = prompt.split()
    best = 0
    for seen in app["seen"]:
        n = 0
        for a, b in zip(words, seen, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    app["seen"].append(words)
    return min(best, len(words) - 1)


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's /tokenize, or llama-server's: a token per whitespace-separated word."""
    body = await request.json()
    if request.app["cfg"].tokenize == "tgi":
        if "inputs" not in body:
            return web.Response(status=422, text="Failed to deserialize the JSON body into "
                                "the target type: missing field `inputs`")
        text, tokens, at = str(body["inputs"]), [{"id": 1, "text": "", "start": 0, "stop": 0}], 0
        for word in text.split():
            at = text.index(word, at)
            tokens.append({"id": len(word), "text": word, "start": at, "stop": at + len(word)})
            at += len(word)
        return web.json_response(tokens)
    if request.app["cfg"].tokenize == "llama.cpp":
        words = str(body.get("content", "")).split()
        return web.json_response({"tokens": list(range(len(words)))})
    words = str(body["prompt"]).split()
    return web.json_response({"count": len(words), "tokens": [len(w) for w in words],
                              "max_model_len": 4096})


async def models(request: web.Request) -> web.Response:
    """The readiness route a started server is polled on; with ``--context N vllm`` its
    card says ``max_model_len`` (vLLM's and SGLang's), ``llama.cpp`` its ``meta.n_ctx``."""
    card: dict[str, object] = {"id": "fake", "object": "model"}
    shape = request.app["cfg"].context_shape
    if shape == "vllm":
        card["max_model_len"] = request.app["cfg"].context
    elif shape == "llama.cpp":
        card["meta"] = {"n_ctx": request.app["cfg"].context, "n_ctx_train": 4096}
    return web.json_response({"object": "list", "data": [card]})


async def info(request: web.Request) -> web.Response:
    """TGI's ``GET /info`` (``--context N tgi``): its router's ``Info``, 2026-01."""
    n = request.app["cfg"].context
    return web.json_response({"model_id": "fake", "max_input_tokens": n - 1,
                              "max_total_tokens": n, "max_client_batch_size": 4})


async def health(request: web.Request) -> web.Response:
    """llama-server's readiness route: public, the API key never asked; 503 during
    ``--warm-up-s`` (SGLang's)."""
    if asyncio.get_running_loop().time() < request.app["warm_until"]:
        return web.Response(status=503)
    return web.json_response({"status": "ok"})


async def one_at_a_time(request: web.Request) -> web.StreamResponse:
    """``--serial``: :func:`complete` under the server's one lock (its ``t0`` after it)."""
    async with request.app["serial"]:
        return await complete(request)


@web.middleware
async def api_key(request: web.Request, handler):  # type: ignore[no-untyped-def]
    key = request.app["cfg"].api_key
    if key and request.path != "/health" \
            and request.headers.get("Authorization") != f"Bearer {key}":
        return web.json_response({"error": {"message": "Invalid API Key",
                                            "type": "authentication_error", "code": 401}},
                                 status=401)
    return await handler(request)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    p.add_argument("--ready-after-s", type=float, default=0.0,
                   help="seconds before it listens (a server loading its model)")
    p.add_argument("--tokenize", nargs="?", const="vllm", choices=("vllm", "llama.cpp", "tgi"),
                   help="serve POST /tokenize, with vLLM's body or llama-server's")
    p.add_argument("--eos-after", type=int, default=0,
                   help="tokens before the model's end of sequence (0: never)")
    p.add_argument("--eos-token", action="store_true",
                   help="the end of sequence a token of its own: a chunk without text with "
                   "finish_reason stop, a step after the last words, counted in usage, as "
                   "vLLM 0.32 (CPU) answered, recorded 2026-11-29")
    p.add_argument("--textless", type=lambda v: {int(i) for i in v.split(",")}, default=set(),
                   help="the chunks (0-based, comma-separated) streamed with an empty text, "
                   "their tokens counted in usage, as vLLM 0.32 (CPU) streamed the EOS tokens "
                   "ignore_eos let through, recorded 2026-11-30")
    p.add_argument("--accepts", default="ignore_eos,min_tokens",
                   help="the length fields it honours, comma-separated")
    p.add_argument("--refuse-unknown", action="store_true",
                   help="answer 422 to a length field it does not accept")
    p.add_argument("--api-key", help="every route but /health needs it (llama-server's)")
    p.add_argument("--warm-up-s", type=float, default=0.0,
                   help="/health answers 503 this long after it listens, /v1/models at "
                   "once, as SGLang 0.5.23 (CPU) did during its own warm-up request, "
                   "recorded 2026-11-29")
    p.add_argument("--close-after-stream", action="store_true",
                   help="close each connection after its stream (llama-server's)")
    p.add_argument("--bos", type=int, default=0, choices=(0, 1),
                   help="1: usage's prompt_tokens counts a BOS, as vLLM 0.32 (CPU) "
                   "answered (its tokenizer's, or its chat template's), recorded 2026-11-29")
    p.add_argument("--system", type=int, default=0, metavar="WORDS",
                   help="a chat template's default system prompt: WORDS words before each "
                   "chat prompt, counted in usage and cached like any prompt's start (as "
                   "Qwen's template adds one when the request has none)")
    p.add_argument("--prefix-cache", action="store_true",
                   help="usage says prompt_tokens_details.cached_tokens: the words a prompt "
                   "shares from its start with an earlier one (vLLM's field)")
    p.add_argument("--hold", action="store_true",
                   help="write each answer's events in one piece at its end, on schedule "
                   "until then: what a client that did not run during the answer reads")
    p.add_argument("--serial", action="store_true",
                   help="answer one request at a time: a queue before the first token")
    p.add_argument("--log", type=argparse.FileType("a"),
                   help="append each request's prompt to this file")
    p.add_argument("--timeline", type=argparse.FileType("a"),
                   help="append each streamed request's content write times to this file")
    p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"),
                   help="serve HTTPS with this certificate (tests/programs/tls: self-signed)")
    p.add_argument("--context", nargs=2, metavar=("TOKENS", "SHAPE"),
                   help="state a context length as vLLM (max_model_len in /v1/models), "
                   "llama.cpp (meta.n_ctx there, as llama-server 0c1e570 answered, recorded "
                   "2026-11-29) or tgi (GET /info) does; a request over it is a 400")
    cfg = p.parse_args()
    cfg.context, cfg.context_shape = (int(cfg.context[0]), cfg.context[1]) if cfg.context \
        else (0, None)
    # who started it, for the tests of servers dltop starts (issue 41 item 5)
    sys.stdout.write(f"PID {os.getpid()} PPID {os.getppid()} PGID {os.getpgid(0)}\n")
    sys.stdout.flush()
    await asyncio.sleep(cfg.ready_after_s)
    app = web.Application(middlewares=[api_key])
    app["cfg"] = cfg
    app["seen"] = []
    app["warm_until"] = asyncio.get_running_loop().time() + cfg.warm_up_s
    app["serial"] = asyncio.Lock()
    handler = one_at_a_time if cfg.serial else complete
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/completions", handler)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    if cfg.context_shape == "tgi":
        app.router.add_get("/info", info)
    if cfg.tokenize:
        app.router.add_post("/tokenize", tokenize)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = None
    if cfg.tls:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(*cfg.tls)
    site = web.TCPSite(runner, "127.0.0.1", cfg.port, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
