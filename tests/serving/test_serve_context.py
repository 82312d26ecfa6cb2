"""Issue 41: the context length the server states (vLLM's and SGLang's ``max_model_len``
in ``/v1/models``, llama-server's ``meta.n_ctx`` there, TGI's ``/info``) is read before
the load: synthetic prompts over it fail the run before a request is sent, naming the
numbers and where they came from; a dataset's longer prompts are dropped as
``max_prompt_tokens`` drops them; a server that states none changes nothing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.serving.conftest import named, run_runner, spec


@pytest.mark.parametrize(("shape", "source"), [
    ("vllm", "max_model_len, GET /v1/models"),
    ("llama.cpp", "meta.n_ctx, GET /v1/models"),
    ("tgi", "max_total_tokens, GET /info")])
def test_prompts_over_the_stated_context_fail_before_a_request(
        tmp_path: Path, fake_server, shape: str, source: str) -> None:
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--context", "64", shape, "--log", str(log), "--api-key", "s3cret")
    job = spec(url, "steady", prompt_tokens=60, new_tokens=8,
               options={"api_key_env": "KEY"})  # the routes are asked with the key
    code, events, _ = run_runner(tmp_path, job, env={"KEY": "s3cret"})
    assert code == 3
    (error,) = named(events, "error")
    assert error["kind"] == "setup"
    assert error["message"] == (
        f"prompt_tokens 60 + new_tokens 8 = 68 > the server's context 64 ({source}): lower "
        "them, or serve a longer context")
    assert not named(events, "request") and log.read_text() == ""  # nothing sent


def test_prompts_within_the_context_run_and_the_environment_says_it(
        tmp_path: Path, fake_server) -> None:
    url = fake_server("--context", "64", "vllm", "--ttft-ms", "1", "--itl-ms", "1")
    code, events, err = run_runner(tmp_path, spec(url, "steady", prompt_tokens=56,
                                                  new_tokens=8))
    assert code == 0, err
    (hello,) = named(events, "hello")
    assert (hello["server_context_tokens"], hello["server_context"]) == (
        64, "64 (max_model_len, GET /v1/models)")
    assert all(r["error"] is None for r in named(events, "request"))


def test_a_server_stating_none_changes_nothing(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    code, events, err = run_runner(tmp_path, spec(url, "steady", prompt_tokens=600,
                                                  new_tokens=8))
    assert code == 0, err
    (hello,) = named(events, "hello")
    assert (hello["server_context_tokens"], hello["server_context"]) == (None, "not stated")


PROMPTS = ["one two three", "w " * 10, "x " * 50, "one two three"]


def dataset(tmp: Path) -> Path:
    path = tmp / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": p.strip()}) + "\n" for p in PROMPTS))
    return path


def test_dataset_prompts_over_the_context_are_dropped(tmp_path: Path, fake_server) -> None:
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--context", "20", "vllm", "--tokenize", "--log", str(log),
                      "--ttft-ms", "1", "--itl-ms", "1")
    job = spec(url, "steady", iterations=12, warmup=0, new_tokens=8,
               options={"dataset": str(dataset(tmp_path))})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    sent = [json.loads(line)["prompt"] for line in log.read_text().splitlines()]
    # 20 - 8 leaves 12: the 50-word prompt dropped, the 10-word one kept
    assert len(sent) == 12 and max(len(p.split()) for p in sent) == 10
    (summary,) = named(events, "load")
    assert (summary["dataset_prompts"], summary["dropped_prompts"],
            summary["prompt_count_by"], summary["dropped_over"]) == (
        4, 1, "tokenize",
        "the server's context 20 (max_model_len, GET /v1/models) less new_tokens 8")
    assert all(r["error"] is None for r in named(events, "request"))


def test_max_prompt_tokens_is_the_users_limit_still(tmp_path: Path, fake_server) -> None:
    url = fake_server("--context", "20", "vllm", "--ttft-ms", "1", "--itl-ms", "1")
    job = spec(url, "steady", iterations=4, warmup=0, new_tokens=8,
               options={"dataset": str(dataset(tmp_path)), "max_prompt_tokens": 5})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    (summary,) = named(events, "load")
    assert summary["dropped_prompts"] == 2 and "dropped_over" not in summary


def test_new_tokens_filling_the_context_leave_no_dataset_prompt(
        tmp_path: Path, fake_server) -> None:
    url = fake_server("--context", "20", "vllm")
    job = spec(url, "steady", new_tokens=20, options={"dataset": str(dataset(tmp_path))})
    code, events, _ = run_runner(tmp_path, job)
    (error,) = named(events, "error")
    assert code == 3 and error["kind"] == "setup" and error["message"] == (
        "new_tokens 20 leaves no room for a prompt in the server's context 20 "
        "(max_model_len, GET /v1/models)")


@pytest.mark.slow  # a dltop run: the note and the environment stored
def test_the_runs_note_says_the_limit_came_from_the_server(tmp_path: Path,
                                                            fake_server) -> None:
    url = fake_server("--context", "20", "llama.cpp", "--ttft-ms", "1", "--itl-ms", "1")
    dataset(tmp_path)
    profile = tmp_path / "p.toml"
    profile.write_text(f'[[matrix]]\nframeworks = ["openai"]\nmodels = ["steady"]\n'
                       f'mode = "serve"\nendpoint = "{url}"\ndataset = "d.jsonl"\n'
                       "iterations = 4\nwarmup = 0\nnew_tokens = 8\n")
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run",
                          "--headless", "--no-telemetry", str(profile)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert res.returncode == 0, res.stdout + res.stderr
    con = sqlite3.connect(db)
    (note,) = con.execute("select note from runs").fetchone()
    assert "1 of 4 dataset prompts over the server's context 20 (meta.n_ctx, GET /v1/models) " \
        "less new_tokens 8 dropped (counted by words: no tokenizer known)" in note, note
    (extra,) = con.execute("select extra from environment").fetchone()
    assert json.loads(extra)["server_context"] == "20 (meta.n_ctx, GET /v1/models)"
