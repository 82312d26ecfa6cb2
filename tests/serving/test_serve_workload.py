"""Serving workloads (shared prefixes, length spreads): the profile keys load, sweep, keep
the identity of a run without them, and refuse bad values naming the file and the key
(exit 2, nothing stored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from tests.dltop_env import query
from tests.serving.conftest import named, run_runner, spec
from tests.serving.test_serve_client import _check_protocol, _child
from tests.serving.test_serve_profile import ENTRY, jobs
from tests.serving.test_serve_tokens import bpe, count

from dltop.errors import UserError
from dltop.jobs.serving import ServeExtras
from dltop.profiles.jobspec import JobSpec


def test_without_the_keys_a_serve_job_has_none() -> None:
    (plain,) = jobs()
    assert (plain.prefix_tokens, plain.prefix_groups, plain.prompt_tokens_spread,
            plain.new_tokens_spread) == (None, None, None, None)


def test_a_prefix_sweep_is_one_configuration_per_length() -> None:
    js = jobs("prefix_tokens = [16, 64]\nprefix_groups = [1, 4]\nprompt_tokens_spread = 0.5")
    assert [(j.prefix_tokens, j.prefix_groups) for j in js] == [
        (16, None), (16, 4), (64, None), (64, 4)]
    assert {j.prompt_tokens_spread for j in js} == {0.5}
    assert len({j.config_key for j in js}) == 4
    for j in js:
        assert JobSpec.from_json_dict(j.to_json_dict()) == j


def test_a_prefix_sweep_through_0_has_no_groups_there() -> None:
    js = jobs("prefix_tokens = [0, 64]\nprefix_groups = 2")
    assert [(j.prefix_tokens, j.prefix_groups) for j in js] == [(None, None), (64, 2)]


def test_none_values_keep_the_identity_of_a_run_without_them() -> None:
    (plain,) = jobs()
    (zeros,) = jobs("prefix_tokens = 0\nprefix_groups = 1\nprompt_tokens_spread = 0\n"
                    "new_tokens_spread = 0.0")
    assert zeros.config_key == plain.config_key


@pytest.mark.parametrize(("extra", "key", "says"), [
    ("prefix_tokens = -1", "prefix_tokens", "an integer >= 0"),
    ("prefix_tokens = 8\nprefix_groups = 0", "prefix_groups", "an integer >= 1"),
    ("prefix_groups = 4", "prefix_groups", "give prefix_tokens > 0"),
    ("prompt_tokens_spread = 1", "prompt_tokens_spread", ">= 0 and < 1, got 1"),
    ("new_tokens_spread = -0.1", "new_tokens_spread", ">= 0 and < 1"),
    ('new_tokens_spread = "wide"', "new_tokens_spread", "got 'wide'"),
])
def test_bad_workload_values_name_file_and_key(extra: str, key: str, says: str) -> None:
    with pytest.raises(UserError) as err:
        jobs(extra)
    assert str(err.value).startswith(f"p.toml: matrix[0].{key}: "), str(err.value)
    assert says in str(err.value)


@pytest.mark.parametrize("key", ["prefix_tokens = 8", "prompt_tokens_spread = 0.5"])
def test_a_dataset_refuses_what_shapes_synthetic_prompts(tmp_path: Path, key: str) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('"hello there"\n')
    text = ENTRY.format(extra=f'dataset = "{data}"\n{key}')
    profile = tmp_path / "p.toml"
    profile.write_text(text)
    db = tmp_path / "r.db"
    r = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    name = key.split()[0]
    assert f"{profile}: matrix[0].{name}: {name} shapes synthetic prompts" in r.stderr
    assert "Traceback" not in r.stderr
    assert not db.exists()


def test_workload_keys_elsewhere_are_refused() -> None:
    from dltop.profiles.loader import parse

    torch = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
             'devices = ["cpu:1"]\nprefix_tokens = 8\n')
    with pytest.raises(UserError, match=r"matrix\[0\].prefix_tokens: prefix_tokens applies"):
        parse(torch, "p.toml", "p")


# -- the runner: prompts, lengths and the cache the server reports ------------------------

tokens = _child("openai_tokens")


def test_prefix_prompts_are_exact_and_shared_by_group(tmp_path: Path) -> None:
    tok = bpe(tmp_path / "tokenizer.json")
    counter = tokens.Local(str(tmp_path / "tokenizer.json"))
    job = {"prompt_tokens": 6, "prefix_tokens": 20, "prefix_groups": 3,
           "prompt_tokens_spread": 0.5}
    prompts = tokens.prompts_for(job, 12, tokens.new_rng(7), None, counter)
    # the prefixes are the first draws of the seed (prompts_for draws them first)
    heads = tokens.prefixes(20, 3, tokens.new_rng(7), counter,
                            tokens.single_words(counter.count))
    assert len(set(heads)) == 3 and [count(tok, h) for h in heads] == [20] * 3
    own = []
    for i, p in enumerate(prompts):
        assert p.startswith(heads[i % 3] + " "), (i, p)
        own.append(count(tok, p) - 20)
    assert all(3 <= n <= 9 for n in own) and len(set(own)) > 1, own  # 6 ± 50 %
    assert tokens.prompts_for(job, 12, tokens.new_rng(7), None, counter) == prompts
    assert tokens.prompts_for(job, 12, tokens.new_rng(8), None, counter) != prompts


def test_without_the_keys_the_prompts_are_what_they_were(tmp_path: Path) -> None:
    bpe(tmp_path / "tokenizer.json")
    counter = tokens.Local(str(tmp_path / "tokenizer.json"))
    rng = tokens.new_rng(3)
    words = tokens.single_words(counter.count)
    before = [tokens.exact_prompt(counter.count, 12, rng, words) for _ in range(5)]
    assert tokens.prompts_for({"prompt_tokens": 12}, 5, tokens.new_rng(3), None,
                              counter) == before


def test_spread_lengths_follow_vllms_range_ratio() -> None:
    rng = tokens.new_rng(0)
    drawn = tokens.spread(10, 0.35, 2000, rng)
    # vLLM: integers of [floor(10 * 0.65), ceil(10 * 1.35)] = [6, 14], every one drawn
    assert set(drawn) == set(range(6, 15))
    assert tokens.spread(10, None, 3, rng) == [10] * 3
    assert min(tokens.spread(1, 0.9, 50, rng)) == 1  # never below one token
    assert tokens.longest(10, 0.35) == 14 and tokens.longest(10, None) == 10


@pytest.mark.slow  # spawns the fake server and the runner
def test_spreads_and_prefixes_reach_the_server_and_its_cache_is_reported(
        tmp_path: Path, fake_server) -> None:
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--tokenize", "--prefix-cache", "--log", str(log), "--ttft-ms", "1",
                      "--itl-ms", "1")
    job = spec(url, "steady", iterations=8, warmup=2, concurrency=1, prompt_tokens=10,
               new_tokens=6, prefix_tokens=16, prefix_groups=2, prompt_tokens_spread=0.5,
               new_tokens_spread=0.5, seed=5)
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    _check_protocol(events)
    sent = [json.loads(line)["prompt"].split() for line in log.read_text().splitlines()]
    assert len(sent) == 10
    # the fake's /tokenize counts words: 16 shared, then 5 to 15 of each request's own
    assert all(21 <= len(p) <= 31 for p in sent), [len(p) for p in sent]
    assert sent[0][:16] == sent[2][:16] != sent[1][:16] == sent[3][:16]
    reqs = sorted(named(events, "request"), key=lambda r: r["request"])
    assert [r["prompt_tokens"] for r in reqs] == [len(p) for p in sent]
    # each request's own max_tokens, forced: it got what it asked
    assert all(3 <= r["max_tokens"] <= 9 for r in reqs)
    assert len({r["max_tokens"] for r in reqs}) > 1
    assert [r["output_tokens"] for r in reqs] == [r["max_tokens"] for r in reqs]
    # the first of each group finds no prefix in the cache (the fake's words), the rest do
    assert [r["cached_tokens"] < 16 for r in reqs[:2]] == [True, True]
    assert all(r["cached_tokens"] >= 16 for r in reqs[2:])
    (hello,) = named(events, "hello")
    assert "after one of 2 shared prefix(es) of prefix_tokens 16" in hello["prompts"]
    (loaded,) = named(events, "load")
    assert loaded["short_requests"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("tokenize", [True, False])
def test_without_usage_a_generation_holds_the_prompt_it_was_sent(
        tmp_path: Path, fake_server, tokenize: bool) -> None:
    # it held prompt_tokens (10) alone: neither the prefix nor the request's own spread
    log = tmp_path / "prompts.jsonl"
    url = fake_server(*(["--tokenize"] if tokenize else []), "--log", str(log),
                      "--ttft-ms", "1", "--itl-ms", "1")
    job = spec(url, "nousage", iterations=6, warmup=1, concurrency=1, prompt_tokens=10,
               new_tokens=4, prefix_tokens=16, prompt_tokens_spread=0.5, seed=5)
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    sent = [len(json.loads(line)["prompt"].split()) for line in log.read_text().splitlines()]
    reqs = {r["index"]: r for r in named(events, "request")}
    assert all(r["prompt_tokens"] is None for r in reqs.values())  # the server said none
    got = sorted((reqs[g["index"]]["request"], g["prompt_tokens"])
                 for g in named(events, "generate"))
    assert [n for _, n in got] == sent and len(set(sent)) > 1, (got, sent)
    assert all(21 <= n <= 31 for n in sent)  # 16 shared and 5 to 15 of its own
    # the fake's /tokenize counts words: exact with it, an estimate (said) without
    assert named(events, "load")[0]["prompt_tokens_estimated"] == (0 if tokenize else 6)
    said = "prompt lengths estimated: 6 measured requests without the server's usage"
    assert (said in _note(events)) is not tokenize


def _note(events: list[dict[str, Any]]) -> str:
    extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)  # no store: the note
    for e in named(events, "request") + named(events, "load"):
        extras.on_event(e)
    return extras.fields().get("note") or ""


@pytest.mark.slow
def test_prompts_an_earlier_run_sent_to_the_same_server_are_named(
        tmp_path: Path, fake_server) -> None:
    # one sweep point twice on one server (a rate sweep of prompt_draw = "seed" too;
    # llama-server: 3 % of the prompt tokens cached at its first rate, 97 % at the next)
    url = fake_server("--tokenize", "--prefix-cache", "--ttft-ms", "1", "--itl-ms", "1")
    job = spec(url, "steady", iterations=10, warmup=2, concurrency=1, prompt_tokens=10,
               new_tokens=3, prefix_tokens=16, prefix_groups=2, seed=5)
    notes = []
    for _ in range(2):
        code, events, err = run_runner(tmp_path, job)
        assert code == 0, err
        measured = [r for r in named(events, "request") if not r["warmup"]]
        notes.append((_note(events), [r["cached_tokens"] - 16 for r in measured]))
    (first, own_first), (second, own_second) = notes
    assert "prompts repeated" not in first and max(own_first) < 5  # the prefix alone
    assert min(own_second) >= 9  # the whole prompt but its last token
    # first in the note (`dltop runs` cuts it): it says what the TTFTs time
    assert second.startswith("prompts repeated: 10 of 10 measured requests found most of "
                             "their own part (past prefix_tokens) in the server's cache")


@pytest.mark.slow
def test_the_longest_drawn_prompt_must_fit_the_context(tmp_path: Path, fake_server) -> None:
    url = fake_server("--context", "60", "vllm", "--tokenize")
    job = spec(url, "steady", prompt_tokens=20, new_tokens=10, prefix_tokens=16,
               prompt_tokens_spread=0.5, new_tokens_spread=0.5)
    code, events, _ = run_runner(tmp_path, job)
    (error,) = named(events, "error")
    assert code == 3 and error["kind"] == "setup"
    assert error["message"] == (
        "prefix_tokens 16 + prompt_tokens 30 (its spread's longest) + new_tokens 15 (its "
        "spread's longest) = 61 > the server's context 60 (max_model_len, GET /v1/models): "
        "lower them, or serve a longer context")


@pytest.mark.slow
def test_max_prompt_tokens_over_the_context_is_capped_and_said(tmp_path: Path,
                                                               fake_server) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in
                            ["one two three", "w " * 10, "x " * 14]))
    url = fake_server("--context", "20", "vllm", "--tokenize", "--ttft-ms", "1",
                      "--itl-ms", "1")
    job = spec(url, "steady", iterations=4, warmup=0, new_tokens=8,
               options={"dataset": str(data), "max_prompt_tokens": 15})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    (summary,) = named(events, "load")
    # 15 asked, 20 - 8 = 12 left by the context: the 14-word prompt is dropped
    assert (summary["dropped_prompts"], summary["dropped_over"]) == (
        1, "the server's context 20 (max_model_len, GET /v1/models) less new_tokens 8 "
        "(max_prompt_tokens 15 capped by it)")


@pytest.mark.slow  # two dltop runs against two fake servers, then the export
def test_the_cached_share_is_stored_and_shown(tmp_path: Path, fake_server) -> None:
    cache = fake_server("--tokenize", "--prefix-cache", "--ttft-ms", "1", "--itl-ms", "1")
    plain = fake_server("--tokenize", "--ttft-ms", "1", "--itl-ms", "1")
    profile = tmp_path / "p.toml"
    profile.write_text("".join(
        f'[[matrix]]\nframeworks = ["openai"]\nmodels = ["{m}"]\nmode = "serve"\n'
        f'endpoint = "{url}"\niterations = 6\nwarmup = 2\nprompt_tokens = 8\n'
        'new_tokens = 4\nprefix_tokens = 24\nconcurrency = 1\n'
        for m, url in (("steady", cache), ("multi", plain))))
    db = tmp_path / "d.db"
    env = {**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"}
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", "--headless",
                          "--no-telemetry", str(profile)], capture_output=True, text=True,
                         timeout=240, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    stored = query(db, "select j.model, s.warmup, s.prompt_tokens, s.cached_tokens, "
                   "s.max_tokens from serve_requests s join runs r on r.id = s.run_id "
                   "join jobs j on j.id = r.job_id order by j.model, s.request")
    cached = [r for r in stored if r["model"] == "steady"]
    assert [r["prompt_tokens"] for r in cached] == [32] * 8  # 24 shared + 8 own
    assert cached[0]["cached_tokens"] < 24 and all(r["cached_tokens"] >= 24
                                                    for r in cached[1:])
    assert {r["max_tokens"] for r in stored} == {4}
    assert {r["cached_tokens"] for r in stored if r["model"] == "multi"} == {None}
    out = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "export", "--table",
                          "summary", "--format", "json"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    rows = {r["model"]: r for r in json.loads(out.stdout)["rows"]}
    measured = cached[2:]  # the warm-up's two never count
    share = 100.0 * sum(r["cached_tokens"] for r in measured) / (32 * 6)
    assert rows["steady"]["cached-share"] == pytest.approx(share)
    assert rows["steady"]["detail"]["cached-share"]["cached"] == sum(
        r["cached_tokens"] for r in measured)
    assert rows["multi"]["cached-share"] is None
    md = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "export", "--table",
                         "summary"], capture_output=True, text=True, timeout=120, env=env).stdout
    assert "| cached % |" in md and "n/a: the server's usage gave no cached_tokens" in md, md


def _request(**over: object) -> dict[str, object]:
    e: dict[str, object] = {
        "event": "request", "index": 0, "request": 0, "warmup": False, "scheduled_s": 0.0,
        "dispatch_lag_s": 0.0, "slot_wait_s": 0.0, "first_byte_s": 0.01, "ttft_s": 0.01,
        "e2e_s": 0.02, "status": 200, "error": None, "prompt_tokens": 40,
        "output_tokens": 2, "tokens_estimated": False, "chunk_s": [0.01, 0.02],
        "chunk_tokens": [1, 1], "cached_tokens": 32, "max_tokens": 2}
    e.update(over)
    return e


@pytest.mark.parametrize(("over", "says"), [
    ({"cached_tokens": -1}, "cached_tokens"), ({"cached_tokens": "32"}, "cached_tokens"),
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens")])
def test_the_engine_refuses_a_bad_cached_or_max_tokens(over: dict[str, object],
                                                      says: str) -> None:
    from dltop.jobs.protocol import EventChecker

    assert EventChecker().problem(_request()) is None
    assert EventChecker().problem(_request(cached_tokens=None, max_tokens=None)) is None
    why = EventChecker().problem(_request(**over))
    assert why is not None and says in why, why
