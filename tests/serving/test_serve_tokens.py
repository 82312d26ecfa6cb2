"""Issue 41 items 2 and 3: output tokens counted by the server's usage, its /tokenize, a
local tokenizer.json, else estimated (and which one said so, stored with the run);
synthetic prompts of exactly ``prompt_tokens`` tokens; the measured load split over
several client processes whose rows all arrive in the one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.dltop_env import query
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from dltop.errors import UserError
from dltop.profiles.loader import parse

from .conftest import RUNNER, named, run_runner, spec
from .test_serve_client import _check_protocol, _child

tokens = _child("openai_tokens")
split = _child("openai_split")


def bpe(path: Path) -> Tokenizer:
    """A small BPE trained here (no download) on text where a few of the prompt words are
    frequent (one token each) and the rest are not (several tokens): counting words
    would get a prompt's length wrong."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"])
    tok.train_from_iterator(["the and tok of to in is"] * 200 + ["with was by from"], trainer)
    tok.save(str(path))
    return tok


def count(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.slow  # spawns the fake server and the runner
def test_a_local_tokenizer_makes_exact_prompts_and_counts_output(tmp_path: Path,
                                                                 fake_server) -> None:
    tok = bpe(tmp_path / "tokenizer.json")
    assert count(tok, "tok tok tok") == 3  # the fake's output: one token a word
    assert any(count(tok, w) > 1 for w in tokens.WORDS)  # words are not tokens here
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--log", str(log))
    job = spec(url, "nousage", iterations=6, warmup=1, prompt_tokens=12, new_tokens=5,
               seed=3, options={"tokenizer": str(tmp_path / "tokenizer.json")})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    _check_protocol(events)
    prompts = [json.loads(line)["prompt"] for line in log.read_text().splitlines()]
    assert len(prompts) == 7 and len(set(prompts)) > 1
    assert [count(tok, p) for p in prompts] == [12] * 7
    reqs = named(events, "request")
    assert [(r["output_tokens"], r["tokens_estimated"]) for r in reqs] == [(5, False)] * 7
    (loaded,) = named(events, "load")
    assert loaded["token_source"] == "tokenizer"
    assert named(events, "setup")[0]["token_source"] == "tokenizer"
    # seeded: the same prompts again (compared as sets of requests: the log has them in
    # the order they reached the server, which two requests in flight may swap)
    code, _, err = run_runner(tmp_path, job)
    assert code == 0, err
    again = [json.loads(line)["prompt"] for line in log.read_text().splitlines()][7:]
    assert sorted(again) == sorted(prompts)


@pytest.mark.slow
def test_the_servers_tokenize_counts_and_sizes_prompts(tmp_path: Path, fake_server) -> None:
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--tokenize", "--log", str(log))
    job = spec(url, "nousage", iterations=5, warmup=1, prompt_tokens=9, new_tokens=4,
               options={"api": "completions"})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    _check_protocol(events)
    prompts = [json.loads(line)["prompt"] for line in log.read_text().splitlines()]
    assert [len(p.split()) for p in prompts] == [9] * 6  # the fake's token is a word
    reqs = named(events, "request")
    assert [(r["output_tokens"], r["tokens_estimated"]) for r in reqs] == [(4, False)] * 6
    assert named(events, "load")[0]["token_source"] == "tokenize"
    # the server's usage comes first; without usage or a tokenizer: estimated
    for model, source in (("steady", "usage"), ("multi", "usage")):
        code, events, err = run_runner(tmp_path, spec(url, model, iterations=3, warmup=0))
        assert code == 0, err
        assert named(events, "load")[0]["token_source"] == source
    bare = fake_server()
    code, events, err = run_runner(tmp_path, spec(bare, "multi", iterations=3, warmup=0))
    assert code == 0, err
    assert named(events, "load")[0]["token_source"] == "usage"
    code, events, err = run_runner(tmp_path, spec(bare, "nousage", iterations=3, warmup=0))
    assert code == 0, err
    assert named(events, "load")[0]["token_source"] == "estimated"
    assert all(r["tokens_estimated"] for r in named(events, "request"))


def test_llama_servers_and_tgis_tokenize_bodies_are_found(fake_server) -> None:
    # llama-server answers vLLM's body {"tokens": []} with status 200: counted as 0 tokens,
    # every prompt failed to reach prompt_tokens and the run ended setup_failed
    url = fake_server("--tokenize", "llama.cpp")
    counter = tokens.counter({}, url, "m", {})
    assert counter is not None and counter.body is tokens._llama_cpp_body
    assert counter.count("the and of") == 3
    assert tokens.counter({}, fake_server("--tokenize"), "m", {}).body is tokens._vllm_body
    # TGI's: a list of tokens led by a BOS it always adds (no character of the text)
    tgi = tokens.counter({}, fake_server("--tokenize", "tgi"), "m", {})
    assert tgi is not None and tgi.body is tokens._tgi_body
    assert tgi.count("the and  of") == 3
    assert tokens.counter({}, fake_server(), "m", {}) is None  # no /tokenize: 404 to both


@pytest.mark.slow
@pytest.mark.parametrize("server", ["llama.cpp", "tgi"])
def test_llama_servers_tokenize_sizes_prompts_and_counts(tmp_path: Path, fake_server,
                                                         server: str) -> None:
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--tokenize", server, "--log", str(log))
    job = spec(url, "nousage", iterations=4, warmup=1, prompt_tokens=7, new_tokens=3,
               options={"api": "completions"})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    prompts = [json.loads(line)["prompt"] for line in log.read_text().splitlines()]
    assert [len(p.split()) for p in prompts] == [7] * 5
    reqs = named(events, "request")
    assert [(r["output_tokens"], r["tokens_estimated"]) for r in reqs] == [(3, False)] * 5
    assert named(events, "load")[0]["token_source"] == "tokenize"


@pytest.mark.slow
def test_the_servers_own_prompt_count_is_stored_and_said(tmp_path: Path, fake_server) -> None:
    # usage.prompt_tokens one above the prompt's tokens by /tokenize: as vLLM 0.32 (CPU)
    # answered, recorded 2026-11-29 (its BOS, by its tokenizer or its chat template)
    for bos, api in ((1, "completions"), (1, "chat"), (0, "chat")):
        url = fake_server("--tokenize", "--bos", str(bos))
        path = tmp_path / f"spec-{bos}-{api}.json"
        path.write_text(json.dumps(spec(url, "steady", iterations=3, warmup=0,
                                        prompt_tokens=9, options={"api": api})))
        env = {k: v for k, v in os.environ.items() if k != "DLTOP_EVENT_FD"}
        res = subprocess.run([sys.executable, str(RUNNER), str(path)], capture_output=True,
                             text=True, timeout=60, env=env)
        assert res.returncode == 0, res.stderr
        reqs = named([json.loads(line) for line in res.stderr.splitlines()
                      if line.startswith('{"')], "request")
        assert reqs and {r["prompt_tokens"] for r in reqs} == {9 + bos}, reqs
        said = "prompt tokens by the server's usage: 10, for prompts of exactly 9 tokens"
        assert (said in res.stdout) == bool(bos), res.stdout


@pytest.mark.slow
def test_a_split_load_merges_every_workers_rows(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "10", "--itl-ms", "2")
    job = spec(url, "steady", iterations=24, warmup=2, new_tokens=4, request_rate=80.0,
               concurrency=4, options={"arrival": "constant", "client_processes": 3})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    _check_protocol(events)
    measured = [r for r in named(events, "request") if not r["warmup"]]
    assert sorted(r["request"] for r in measured) == list(range(2, 26))
    assert all(r["error"] is None and r["output_tokens"] == 4 for r in measured)
    by_worker: dict[int, list[dict]] = {}
    for r in measured:
        by_worker.setdefault(r["worker"], []).append(r)
    assert sorted(by_worker) == [0, 1, 2]
    # in flight: the whole client's (every worker's newest count summed), never more
    # than the other slots; none once the last request ended
    assert all(0 <= r["in_flight"] <= 3 for r in measured) and measured[-1]["in_flight"] == 0
    for w, rows in by_worker.items():  # round-robin: worker w sends requests w, w+3, ...
        assert sorted(r["request"] - 2 for r in rows) == list(range(w, 24, 3))
        # each worker's lag against its own loop, from the one shared start: small
        assert all(0 <= r["dispatch_lag_s"] < 0.5 for r in rows)
        assert {round(r["scheduled_s"] * 80) for r in rows} == set(range(w, 24, 3))
    (loaded,) = named(events, "load")
    assert loaded["client_processes"] == 3 and loaded["client_cpu_s"] > 0
    # the window spans the whole schedule (23 gaps of 12.5 ms), from the shared start
    assert 23 / 80 <= loaded["window_s"] < 23 / 80 + 2.0
    # "auto" judges the warm-up (sent by the runner alone), then splits or not: either
    # way every measured request arrives, from as many processes as the load says
    job["options"]["client_processes"] = "auto"
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    measured = [r for r in named(events, "request") if not r["warmup"]]
    assert sorted(r["request"] for r in measured) == list(range(2, 26))
    assert {r["worker"] for r in named(events, "request") if r["warmup"]} == {0}
    assert len({r["worker"] for r in measured}) == named(events, "load")[0]["client_processes"]


class _Dies:
    def stop(self, warmup: bool) -> None:
        return None

    async def run(self, phases: list, send: object, start: float) -> None:
        os._exit(7)


def test_a_dead_worker_or_a_refused_endpoint_ends_a_split_load() -> None:
    with pytest.raises(RuntimeError, match=r"^2 of 2 client processes died before their "
                       r"share ended \(exit statuses \[7, 7\]\)"):
        split.run(lambda slots: _Dies(), 2, 2, ["a", "b"], [0.0, 0.0], [0, 1], print)
    load = split.load  # the module the split's workers raise from

    def refused(slots: int) -> object:
        return load.Client("http://127.0.0.1:9/v1", "chat", "m", {}, 4, (), slots, 5.0)
    with pytest.raises(load.SetupFailed, match=r"connection refused at http://127\.0\.0\.1:9/v1"):
        split.run(refused, 2, 2, ["a", "b"], [0.0, 0.0], [0, 1], print)


def test_auto_splits_only_a_client_that_fell_behind() -> None:
    quiet = [0.001] * 50
    assert split.auto_count(quiet, 0.2, 1.0, 8, 16) == 1
    assert split.auto_count(quiet, 0.95, 1.0, 8, 16) == 2  # a core nearly full
    assert split.auto_count(quiet + [0.05] * 5, 0.5, 1.0, 8, 16) == 2  # lag p99 50 ms
    assert split.auto_count(quiet, 3.0, 1.0, 4, 16) == 4  # at most the CPUs...
    assert split.auto_count(quiet, 3.0, 1.0, 8, 3) == 3  # ...and the concurrency
    assert split.auto_count(quiet, 3.0, 1.0, 1, 16) == 1  # one CPU: nothing to split over


def test_exact_prompts_adjust_words_that_are_several_tokens(tmp_path: Path) -> None:
    import random

    tok = bpe(tmp_path / "t.json")
    words = tokens.single_words(lambda t: count(tok, t))
    assert words and set(words) < set(tokens.WORDS)
    rng = random.Random(0)
    for k in (1, 7, 64):
        assert count(tok, tokens.exact_prompt(lambda t: count(tok, t), k, rng, words)) == k
    # every word several tokens: adjusted by trial, or refused
    with pytest.raises(ValueError, match="no prompt of exactly 3 tokens"):
        tokens.exact_prompt(lambda t: 2 * len(t.split()), 3, rng, list(tokens.WORDS))


ENTRY = """[[matrix]]
frameworks = ["openai"]
models = ["m"]
mode = "serve"
endpoint = "http://127.0.0.1:8000/v1"
{extra}
"""


def test_tokenizer_and_client_processes_are_options(tmp_path: Path) -> None:
    bpe(tmp_path / "tok.json")
    (job,) = parse(ENTRY.format(extra='tokenizer = "tok.json"\nclient_processes = "auto"'),
                   "p.toml", "p", profile_dir=tmp_path).jobs
    assert dict(job.options)["tokenizer"] == str(tmp_path / "tok.json")
    assert dict(job.options)["client_processes"] == "auto"
    (job,) = parse(ENTRY.format(extra="client_processes = 4"), "p.toml", "p").jobs
    assert dict(job.options)["client_processes"] == 4


@pytest.mark.parametrize(("extra", "key", "says"), [
    ('tokenizer = "missing.json"', "tokenizer", "no such file: "),
    ('tokenizer = "garbage.json"', "tokenizer", "garbage.json is not a tokenizer.json"),
    ('tokenizer = "."', "tokenizer", "no such file: "),
    ("client_processes = 0", "client_processes", 'expected "auto" or an integer >= 1 and <= '
     "256, got 0"),
    ("client_processes = 257", "client_processes", "got 257"),
    ('client_processes = "many"', "client_processes", "got 'many'"),
])
def test_bad_tokenizer_or_client_processes_name_file_and_key(tmp_path: Path, extra: str,
                                                             key: str, says: str) -> None:
    (tmp_path / "garbage.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(UserError) as err:
        parse(ENTRY.format(extra=extra), "p.toml", "p", profile_dir=tmp_path)
    assert str(err.value).startswith(f"p.toml: matrix[0].{key}: "), str(err.value)
    assert says in str(err.value)


@pytest.mark.slow
def test_dltop_run_stores_the_token_source_and_refuses_a_bad_tokenizer(
        tmp_path: Path, fake_server) -> None:
    url = fake_server("--tokenize")
    profile = tmp_path / "p.toml"
    profile.write_text(ENTRY.replace("http://127.0.0.1:8000/v1", url).format(
        extra='models = ["nousage", "steady"]\niterations = 4\nwarmup = 0\nnew_tokens = 3\n'
              "prompt_tokens = 5\nclient_processes = 2\nconcurrency = 2\ntimeout_s = 30")
        .replace('models = ["m"]\n', ""))
    db = tmp_path / "d.db"
    env = {**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"}
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                         capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    runs = query(db, "select j.model, r.status, r.token_source, r.client_bound, e.extra "
                 "from runs r join jobs j on j.id = r.job_id join environment e on "
                 "e.run_id = r.id order by r.id")
    assert [(r["model"], r["status"], r["token_source"]) for r in runs] == [
        ("nousage", "ok", "tokenize"), ("steady", "ok", "usage")]
    extra = json.loads(runs[0]["extra"])
    assert (extra["token_source"], extra["client_processes"]) == ("tokenize", 2)
    rows = query(db, "select count(*) n from serve_requests")
    assert rows[0]["n"] == 8
    bad = tmp_path / "bad.toml"
    bad.write_text(ENTRY.format(extra='tokenizer = "nope/tokenizer.json"'))
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(tmp_path / "b.db"), "run",
                          str(bad)], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 2, res.stderr
    assert f"{bad}: matrix[0].tokenizer: no such file: {tmp_path}/nope/tokenizer.json" \
        in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "b.db").exists()
