"""The fake OpenAI-compatible server ``benchmarks/serve_client.py`` loads: a streaming
chat endpoint with a known schedule, cheap enough that the client, not the server, is
what the benchmark measures.

Each response's first content chunk is due ``--ttft-ms`` after the request arrived,
then a chunk every ``--itl-ms``, each of ``--tokens-per-chunk`` tokens (the last one
the rest) of ``max_tokens``; each token is the text ``"tok "`` (one word: a word-level
tokenizer counts it as one token). A chat stream opens with a role-only chunk and ends
with a usage chunk and ``[DONE]``, as vLLM's. Every chunk's bytes but the text are
made once per request. ``GET /stats`` answers the requests and content chunks served
so far and the monotonic times of the first request and of the last stream's end
(the window the client's CPU is read over; monotonic time is the machine's, shared
with the benchmark); ``GET /reset`` zeroes them. Prints ``PORT <n>`` once it listens.

    python benchmarks/serve_fake.py --ttft-ms 20 --itl-ms 4 --tokens-per-chunk 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

TOKEN = "tok "


def chunk_schedule(ttft_ms: float, itl_ms: float, tokens: int,
                   per_chunk: int) -> list[tuple[float, int]]:
    """Each content chunk's (seconds after the request, tokens it carries).

    Args:
        ttft_ms: when the first chunk is due.
        itl_ms: the gap between chunks.
        tokens: the response's output tokens (``max_tokens``), at least 1.
        per_chunk: tokens a chunk carries (the last chunk the rest).
    """
    out, sent = [], 0
    while sent < tokens:
        n = min(per_chunk, tokens - sent)
        out.append(((ttft_ms + len(out) * itl_ms) / 1000.0, n))
        sent += n
    return out


def sse(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def complete(request):  # type: ignore[no-untyped-def]
    from aiohttp import web

    t0 = time.monotonic()
    stats = request.app["stats"]
    if stats["first_mono"] is None:
        stats["first_mono"] = t0
    stats["requests"] += 1
    body = await request.json()
    cfg = request.app["cfg"]
    tokens = max(1, int(body.get("max_tokens") or 16))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    head = {"id": "x", "object": "chat.completion.chunk", "model": body.get("model")}
    await resp.write(sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                               "finish_reason": None}]}))
    plan = chunk_schedule(cfg.ttft_ms, cfg.itl_ms, tokens, cfg.tokens_per_chunk)
    for i, (due_s, n) in enumerate(plan):
        await asyncio.sleep(max(0.0, t0 + due_s - time.monotonic()))
        finish = "length" if i == len(plan) - 1 else None
        await resp.write(sse({**head, "choices": [{"index": 0, "delta": {
            "content": TOKEN * n}, "finish_reason": finish}]}))
        stats["chunks"] += 1
    words = len(str(body["messages"][-1]["content"]).split())
    await resp.write(sse({**head, "choices": [], "usage": {
        "prompt_tokens": words, "completion_tokens": tokens,
        "total_tokens": words + tokens}}))
    await resp.write(b"data: [DONE]\n\n")
    stats["last_mono"] = time.monotonic()
    return resp


async def serve(cfg: argparse.Namespace) -> None:
    from aiohttp import web

    app = web.Application()
    app["cfg"] = cfg
    app["stats"] = {"requests": 0, "chunks": 0, "first_mono": None, "last_mono": None}

    async def stats(request):  # type: ignore[no-untyped-def]
        return web.json_response(request.app["stats"])

    async def reset(request):  # type: ignore[no-untyped-def]
        request.app["stats"].update(requests=0, chunks=0, first_mono=None, last_mono=None)
        return web.json_response({})

    async def models(request):  # type: ignore[no-untyped-def]
        return web.json_response({"object": "list", "data": [{"id": "fake", "object":
                                                              "model"}]})

    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    app.router.add_get("/reset", reset)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=4.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
