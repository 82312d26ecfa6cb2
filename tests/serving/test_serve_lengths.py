"""Issue 41 item 3: output lengths forced with ``max_tokens`` plus the fields each server
accepts (``force_length``: ``ignore_eos``, ``min_tokens``), and where they are not, the
real lengths stored and the run saying so. Against the fake server's end of sequence
(``--eos-after``), honoured, ignored or refused (422) like the real servers do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.dltop_env import query

from dltop.errors import UserError
from dltop.jobs.protocol import EventChecker
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.profiles.servers import PRESETS

from .conftest import named, run_runner, spec

ENTRY = """{tables}
[[matrix]]
frameworks = ["openai"]
models = ["m"]
mode = "serve"
{extra}
"""


def jobs(extra: str, tables: str = "") -> list[JobSpec]:
    return list(parse(ENTRY.format(tables=tables, extra=extra), "p.toml", "p",
                      logical_cores=2).jobs)


def forced(extra: str, tables: str = "") -> list[object]:
    return [dict(j.options).get("force_length") for j in jobs(extra, tables)]


@pytest.fixture(autouse=True)
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_CONFIG", str(tmp_path / "config.toml"))


def test_each_preset_forces_with_what_it_accepts_and_a_profile_narrows_it() -> None:
    assert {n: s.extensions for n, s in PRESETS.items()} == {
        "vllm": ("ignore_eos", "min_tokens"), "sglang": ("ignore_eos", "min_tokens"),
        "llama-cpp": ("ignore_eos",), "tgi": (), "transformers": ()}
    # a sweep of servers: each job sends what its own server accepts
    assert forced('server = ["vllm", "llama-cpp", "tgi", "transformers"]') == [
        ("ignore_eos", "min_tokens"), ("ignore_eos",), None, None]
    assert forced('server = "vllm"\nforce_length = ["min_tokens"]') == [("min_tokens",)]
    assert forced('server = "vllm"\nforce_length = []') == [None]  # none sent
    table = '[servers.mine]\ncommand = "srv {port}"\nextensions = ["min_tokens"]'
    assert forced('server = "mine"', table) == [("min_tokens",)]
    # an endpoint already serving: nothing unless the profile says what it accepts
    url = 'endpoint = "http://127.0.0.1:9/v1"'
    assert forced(url) == [None] and forced(url + "\nforce_length = []") == [None]
    assert forced(url + '\nforce_length = ["min_tokens", "ignore_eos"]') == [
        ("ignore_eos", "min_tokens")]


@pytest.mark.parametrize(("extra", "says"), [
    ('server = "transformers"\nforce_length = ["ignore_eos"]',
     "matrix[0].force_length: server 'transformers' does not accept ignore_eos"),
    ('server = "llama-cpp"\nforce_length = ["min_tokens"]',
     "matrix[0].force_length: server 'llama-cpp' does not accept min_tokens"),
    ('endpoint = "http://h:1/v1"\nforce_length = ["max_new_tokens"]',
     "matrix[0].force_length: expected a list of distinct request fields out of "
     "ignore_eos, min_tokens"),
    ('endpoint = "http://h:1/v1"\nforce_length = true', "matrix[0].force_length: expected"),
    ('endpoint = "http://h:1/v1"\nforce_length = ["ignore_eos", "ignore_eos"]',
     "matrix[0].force_length: expected a list of distinct"),
    ('endpoint = "http://h:1/v1"\nignore_eos = true',  # the key before force_length
     'matrix[0].ignore_eos: unknown key; it is now force_length = ["ignore_eos"]'),
])
def test_fields_a_server_does_not_accept_exit_naming_the_key(extra: str, says: str) -> None:
    with pytest.raises(UserError, match=r"^p\.toml: ") as info:
        jobs(extra)
    assert says in str(info.value)


def _load(events: list[dict]) -> dict:
    checker = EventChecker()
    assert all(checker.problem(e) is None for e in events)
    (load,) = named(events, "load")
    return load


@pytest.mark.slow  # four runner processes against one fake server: a few seconds
def test_lengths_forced_where_accepted_and_counted_where_not(tmp_path: Path,
                                                             fake_server) -> None:
    url = fake_server("--ttft-ms", "2", "--itl-ms", "1", "--eos-after", "3")
    both = {"force_length": ["ignore_eos", "min_tokens"]}
    code, events, err = run_runner(tmp_path, spec(url, "steady", options=both))
    assert code == 0, err
    reqs = named(events, "request")
    assert [r["output_tokens"] for r in reqs] == [8] * 7  # max_tokens, past the EOS
    load = _load(events)
    assert (load["length_forced"], load["short_requests"], load["ok"]) == (True, 0, 6)
    # min_tokens alone forces it too (vLLM, SGLang)
    code, events, err = run_runner(tmp_path, spec(url, "steady",
                                                  options={"force_length": ["min_tokens"]}))
    assert code == 0 and {r["output_tokens"] for r in named(events, "request")} == {8}
    # nothing sent: the real lengths, stored, and the run says they were not forced
    code, events, err = run_runner(tmp_path, spec(url, "steady"))
    assert code == 0, err
    assert {r["output_tokens"] for r in named(events, "request")} == {3}
    load = _load(events)
    assert (load["length_forced"], load["short_requests"]) == (False, 6)
    # a server that takes the fields and ignores them: forced, and shorter all the same
    quiet = fake_server("--ttft-ms", "2", "--itl-ms", "1", "--eos-after", "3",
                        "--accepts", "")
    code, events, err = run_runner(tmp_path, spec(quiet, "steady", options=both))
    assert code == 0, err
    load = _load(events)
    assert (load["length_forced"], load["short_requests"]) == (True, 6)


@pytest.mark.slow  # spawns the fake server and the runner
def test_an_eos_token_without_text_is_a_token_of_its_own(tmp_path: Path,
                                                         fake_server) -> None:
    # the EOS a chunk of its own, no text, one step after the words, counted in usage: as
    # vLLM 0.32 (CPU) answered, recorded 2026-11-29 (6 words, then "", usage 7)
    url = fake_server("--ttft-ms", "20", "--itl-ms", "15", "--eos-after", "3",
                      "--eos-token")
    for api in ("chat", "completions"):
        code, events, err = run_runner(tmp_path, spec(url, "steady", options={"api": api}))
        assert code == 0, err
        for r in named(events, "request"):
            assert r["output_tokens"] == 4  # three words and the EOS, as usage says
            # the EOS counted where it came, not as a second token of the first word's
            # chunk (which put a zero gap into the per-token ITL)
            assert r["chunk_tokens"] == [1, 1, 1, 1], r
            gaps = [b - a for a, b in zip(r["chunk_s"], r["chunk_s"][1:], strict=False)]
            assert len(gaps) == 3 and min(gaps) > 0.005, gaps
        itls = [x for g in named(events, "generate") for x in g.get("itl_s") or []]
        assert itls and min(itls) > 0.005, itls
    # a finish with text (the fake's default): its last words' chunk, nothing added
    plain = fake_server("--ttft-ms", "2", "--itl-ms", "1", "--eos-after", "3")
    code, events, err = run_runner(tmp_path, spec(plain, "steady"))
    assert code == 0, err
    assert {tuple(r["chunk_tokens"]) for r in named(events, "request")} == {(1, 1, 1)}


@pytest.mark.slow  # spawns the fake server and the runner
def test_tokens_without_text_are_each_a_chunk_of_their_own(tmp_path: Path,
                                                           fake_server) -> None:
    # vLLM 0.32 (CPU) under ignore_eos streams the EOS tokens it lets through as chunks of
    # text "" mid-answer, one per token, counted in usage (recorded 2026-11-30: 35 of 100
    # answers of 16 tokens had fewer than 16 words; vLLM's bench timed every chunk)
    url = fake_server("--ttft-ms", "20", "--itl-ms", "15", "--textless", "0,3,4,5")
    for api in ("chat", "completions"):
        code, events, err = run_runner(tmp_path, spec(url, "steady", options={"api": api}))
        assert code == 0, err
        for r in named(events, "request"):
            assert r["output_tokens"] == 8
            # each token where it came: none shared into the words' chunks
            assert r["chunk_tokens"] == [1] * 8, r
            gaps = [b - a for a, b in zip(r["chunk_s"], r["chunk_s"][1:], strict=False)]
            assert len(gaps) == 7 and min(gaps) > 0.005, gaps
            # TTFT at the first token (its text empty), not at the first words 15 ms on
            assert 0.015 < r["ttft_s"] == r["chunk_s"][0] < 0.030, r
        itls = [x for g in named(events, "generate") for x in g.get("itl_s") or []]
        assert len(itls) == 7 * 7 and min(itls) > 0.005, itls


def test_a_field_the_server_refuses_is_a_request_error_naming_it(tmp_path: Path,
                                                                fake_server) -> None:
    # transformers serve's answer: 422 "Unexpected fields in the request: {'ignore_eos'}"
    url = fake_server("--ttft-ms", "2", "--itl-ms", "1", "--accepts", "min_tokens",
                      "--refuse-unknown")
    # max_error_rate 0.99: spent by the last request only (no early stop)
    job = spec(url, "steady", iterations=3, warmup=0,
               options={"force_length": ["ignore_eos", "min_tokens"], "max_error_rate": 0.99})
    code, events, err = run_runner(tmp_path, job)
    assert code == 3, err  # every request failed: over max_error_rate
    reqs = named(events, "request")
    assert [r["status"] for r in reqs] == [422] * 3
    assert all(r["error"].startswith(
        "HTTP 422: the server refused the request field(s) ignore_eos (sent to force the "
        "length: leave them out of force_length for this server); its answer: ")
        and "Unexpected fields in the request" in r["error"] for r in reqs)
    # what it does accept, it gets
    job["options"]["force_length"] = ["min_tokens"]
    code, events, err = run_runner(tmp_path, job)
    assert code == 0 and {r["status"] for r in named(events, "request")} == {200}, err


PROFILE = """[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
models = ["steady"]
new_tokens = 8
prompt_tokens = 4
iterations = 5
warmup = 1
timeout_s = 30
[[matrix]]
force_length = ["ignore_eos"]
[[matrix]]
seed = 1
[[matrix]]
seed = 2
new_tokens_spread = 0.5
"""


@pytest.mark.slow  # a dltop campaign of two runs
def test_the_run_stores_whether_forced_and_the_shorter_requests(tmp_path: Path,
                                                                fake_server) -> None:
    url = fake_server("--ttft-ms", "2", "--itl-ms", "1", "--eos-after", "5")
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(url=url))
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run",
                          str(profile)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert res.returncode == 0, res.stdout + res.stderr
    runs = query(db, "select status, length_forced, short_requests, note from runs "
                 "order by id")
    # each request of the spread asked its own max_tokens (4 to 12): shorter than its own
    asked = [r["max_tokens"] for r in query(db, "select max_tokens from serve_requests "
                                            "where run_id = 3 and not warmup")]
    short = sum(m > 5 for m in asked)
    assert 0 < short < 5 and len(set(asked)) > 1, asked
    assert [(r["status"], r["length_forced"], r["short_requests"]) for r in runs] == [
        ("ok", 1, 0), ("ok", 0, 5), ("ok", 0, short)]
    assert runs[0]["note"] is None
    assert runs[1]["note"] == "lengths not forced: 5 of 5 shorter than new_tokens"
    assert runs[2]["note"] == (f"lengths not forced: {short} of 5 shorter than their own "
                               "max_tokens (new_tokens_spread)")
    tokens = query(db, "select run_id, sum(output_tokens) as n from serve_requests "
                   "where not warmup group by run_id order by run_id")
    assert [t["n"] for t in tokens] == [40, 25, sum(min(m, 5) for m in asked)]
