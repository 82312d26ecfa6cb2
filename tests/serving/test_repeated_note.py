"""``prompts repeated`` (jobs/serving.py) names replayed prompts, not a chat template's
system prompt: Qwen2.5's template adds a default system prompt to every chat request that
has none, a head the same in every request and so served from a prefix cache, which with
short prompts was most of the usage's ``prompt_tokens``. The fake server's ``--system N``
adds such a head; the runner's ``sent_tokens`` (its own count of what it sent) tells it
apart from the prompt's own part."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from dltop.jobs.serving import ServeExtras

from .conftest import named, run_runner, spec

FORCED = {"force_length": ["ignore_eos", "min_tokens"]}


def note(events: list[dict[str, Any]]) -> str:
    extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)
    for e in named(events, "request") + named(events, "load"):
        extras.on_event(e)
    return str(extras.fields().get("note") or "")


def test_a_chat_templates_cached_system_prompt_is_not_a_repeat(tmp_path: Path,
                                                               fake_server) -> None:
    url = fake_server("--tokenize", "--prefix-cache", "--system", "24", "--ttft-ms", "1",
                      "--itl-ms", "1")
    job = spec(url, "m", iterations=8, warmup=2, prompt_tokens=6, new_tokens=2, seed=1,
               options=FORCED)
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    measured = [r for r in named(events, "request") if not r["warmup"]]
    # the template's 24 words in the usage and in the cache; the client sent 6 tokens
    assert [(r["prompt_tokens"], r["sent_tokens"]) for r in measured] == [(30, 6)] * 8
    assert all(r["cached_tokens"] >= 24 for r in measured)  # > half of 30: the old rule
    assert "prompts repeated" not in note(events)
    # the same prompts again on the same server (prompt_draw = "seed"'s replay): named
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    assert note(events).startswith("prompts repeated: 8 of 8 measured requests"), note(events)


def test_without_the_clients_count_the_usage_is_the_prompt() -> None:
    # Labelled synthetic events (the judgement alone): no tokenizer counted what was sent
    def request(i: int, cached: int, sent: int | None) -> dict[str, Any]:
        return {"v": 1, "event": "request", "index": i, "request": i, "warmup": False,
                "scheduled_s": 0.0, "dispatch_lag_s": 0.0, "slot_wait_s": 0.0,
                "ttft_s": 0.01, "e2e_s": 0.02, "status": 200, "output_tokens": 2,
                "tokens_estimated": False, "chunk_s": [0.01, 0.02], "chunk_tokens": [1, 1],
                "prompt_tokens": 30, "cached_tokens": cached, "sent_tokens": sent}

    load = {"v": 1, "event": "load", "window_s": 1.0, "client_cpu_s": 0.1, "ok": 4}
    for sent, cached, repeated in ((None, 24, True), (6, 24, False), (6, 28, True),
                                   (30, 14, False), (30, 16, True)):
        extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)
        for i in range(4):
            extras.on_event(request(i, cached, sent))
        extras.on_event(load)
        got = str(extras.fields().get("note") or "")
        assert got.startswith("prompts repeated") is repeated, (sent, cached, got)
