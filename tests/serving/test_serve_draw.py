"""The prompts of a sweep point (``prompt_draw``, docs/serving.md#workloads): a group's
server sees fresh prompts at each rate of a sweep, engines compared at one point get the
same ones, and ``prompt_draw = "seed"`` keeps every point on the same prompts (as before
the key existed). Against tests/programs/fake_openai.py's prefix cache (a vLLM-like
``cached_tokens``: the longest run of words a prompt shares from its start with one sent
before)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.dltop_env import query
from tests.serving.conftest import named, run_runner, spec
from tests.serving.test_serve_profile import jobs
from tests.serving.test_server_group import ENV, FAKE, dltop

from dltop.childfiles import child_module
from dltop.errors import UserError

tokens = child_module("openai_tokens")


def sent(log: Path) -> list[str]:
    return [json.loads(line)["prompt"] for line in log.read_text().splitlines()]


def test_the_draw_seed_is_the_stated_hash_of_the_sweep_point() -> None:
    job = spec("http://127.0.0.1:1/v1", "m", request_rate=4.0, seed=3)
    text = tokens.point(job)
    # docs/serving.md's recipe: the point's values, in POINT_KEYS' order, as compact JSON
    assert text == '[3,0,4.0,2,"poisson",1.0,6,1,8,8,0,1,0.0,0.0]'
    digest = hashlib.sha256(text.encode()).digest()
    assert tokens.draw_seed(job) == int.from_bytes(digest[:8], "big") % 2 ** 63
    # the engine's side (server, endpoint, served model, api) is not in it
    other = spec("http://10.0.0.1:9/v1", "other-name", request_rate=4.0, seed=3,
                 server="vllm", options={"api": "completions", "force_length": ["ignore_eos"]})
    assert tokens.draw_seed(other) == tokens.draw_seed(job)
    for change in ({"request_rate": 8.0}, {"concurrency": 3}, {"repeat": 1}, {"seed": 4},
                   {"options": {"arrival": "constant"}}, {"prefix_tokens": 16}):
        assert tokens.draw_seed(spec("http://127.0.0.1:1/v1", "m", **{
            "request_rate": 4.0, "seed": 3, **change})) != tokens.draw_seed(job), change
    old = spec("http://127.0.0.1:1/v1", "m", request_rate=4.0, seed=3,
               options={"prompt_draw": "seed"})
    assert tokens.draw_seed(old) == 3


@pytest.mark.slow
@pytest.mark.parametrize("dataset", [False, True])
def test_each_rate_draws_its_own_prompts_and_each_engine_the_same(
        tmp_path: Path, fake_server, dataset: bool) -> None:
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    urls = [fake_server("--tokenize", "--prefix-cache", "--ttft-ms", "1", "--itl-ms", "1",
                        "--log", str(log)) for log in logs]
    extra: dict[str, Any] = {"prefix_tokens": 16, "prefix_groups": 2}
    if dataset:
        data = tmp_path / "prompts.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"question {i} of the set"}) + "\n"
                                for i in range(1000)))
        extra = {"options": {"dataset": str(data)}}
    base = dict(iterations=8, warmup=2, concurrency=1, prompt_tokens=10, new_tokens=3,
                seed=5, **extra)
    # one server, two rates; then another engine (endpoint, served name) at the first rate
    for url, model, rate in ((urls[0], "steady", 200.0), (urls[0], "steady", 400.0),
                             (urls[1], "other", 200.0)):
        code, events, err = run_runner(tmp_path, spec(url, model, request_rate=rate, **base))
        assert code == 0, err
        assert named(events, "hello")[0]["prompt_seed"] > 2 ** 32  # a hash, not seed 5
    first, second = sent(logs[0])[:10], sent(logs[0])[10:]
    assert len(first) == len(second) == 10  # warm-up requests, then measured ones
    assert sent(logs[1]) == first  # the other engine: the same prompts, in order
    # the second rate shares no prompt with the first, warm-up ones included; a dataset's
    # samples are drawn with replacement, so two points' may share one by chance (the
    # expected 10 x 10 / 1000 = 0.1)
    assert len(set(first) & set(second)) <= (1 if dataset else 0)
    if not dataset:  # nor a shared prefix: the first rate's are not reused
        heads = {" ".join(p.split()[:16]) for p in first}
        assert len(heads) == 2 and not heads & {" ".join(p.split()[:16]) for p in second}


@pytest.mark.slow
def test_a_group_servers_rate_sweep_finds_no_earlier_rate_in_its_cache(
        tmp_path: Path) -> None:
    # dltop run: one fake server for the sweep; the stored cached_tokens per rate
    head = f"""[servers.fake]
command = "{sys.executable} {FAKE} --port {{port}} --tokenize --prefix-cache --ttft-ms 1 --itl-ms 1"
timeout_s = 20
[defaults]
frameworks = ["openai"]
mode = "serve"
server = "fake"
new_tokens = 3
prompt_tokens = 10
prefix_tokens = 16
prefix_groups = 2
iterations = 8
warmup = 2
concurrency = 1
timeout_s = 40
"""
    runs = {}
    for draw in ("point", "seed"):
        path = tmp_path / f"{draw}.toml"
        path.write_text(head + f'prompt_draw = "{draw}"\n[[matrix]]\nmodels = ["steady"]\n'
                        "request_rate = [200, 400, 800]\n")
        db = tmp_path / f"{draw}.db"
        res = subprocess.run(dltop(db, str(path)), capture_output=True, text=True,
                             timeout=240, env=ENV)
        assert res.returncode == 0, res.stdout + res.stderr
        rows = query(db, "select r.id, r.note, r.server_cold_start_s, s.warmup, "
                     "s.cached_tokens from runs r join serve_requests s on s.run_id = r.id "
                     "order by r.id, s.request")
        drawn = [json.loads(e["extra"])["prompt_seed"] for e in query(
            db, "select extra from environment order by run_id")]
        # stored with the run (its environment): what reproduces its prompts
        assert (len(set(drawn)) == 3) if draw == "point" else (drawn == [0, 0, 0]), drawn
        runs[draw] = {}
        for row in rows:
            runs[draw].setdefault(row["id"], (row["note"], row["server_cold_start_s"], []))[
                2].append(row)
    for draw, by_run in runs.items():
        cold = [c for _, c, _ in by_run.values()]
        assert cold[0] is not None and cold[1:] == [None, None], draw  # one server
    point = list(runs["point"].values())
    for note, _, rows in point:
        # each rate: its own two prefixes, cached after their first use within the run
        assert "prompts repeated" not in (note or "")
        assert [r["cached_tokens"] < 16 for r in rows[:2]] == [True, True]
        assert all(16 <= r["cached_tokens"] < 16 + 5 for r in rows[2:])
    # the old behaviour, asked for: every later rate replays the first from the cache
    seed = list(runs["seed"].values())
    assert "prompts repeated" not in (seed[0][0] or "")
    for note, _, rows in seed[1:]:
        assert all(r["cached_tokens"] >= 16 + 9 for r in rows)
        assert note.startswith("prompts repeated: 8 of 8 measured requests")


def test_prompt_draw_takes_point_or_seed_and_no_list() -> None:
    (job,) = jobs()
    assert "prompt_draw" not in dict(job.options)  # the default keeps the identity
    (job,) = jobs('prompt_draw = "seed"')
    assert dict(job.options)["prompt_draw"] == "seed"
    for bad in ('"rate"', '["point", "seed"]'):
        with pytest.raises(UserError) as err:
            jobs(f"prompt_draw = {bad}")
        assert "p.toml" in str(err.value) and "prompt_draw" in str(err.value)
        assert "point" in str(err.value)
