"""Issue 41, the audit: a dataset's prompts longer than ``max_prompt_tokens`` are dropped
before the load (a 3000-word ShareGPT prompt got HTTP 400 from llama-server, over its
context), counted by the tokenizer known (the server's ``/tokenize``) else by words, the
count in the run's note; a bad value exits 2 naming the file and the key, and a dataset
with no prompt left fails the run before a request is sent."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.serving.conftest import named, run_runner, spec

from dltop.childfiles import child_module
from dltop.errors import UserError
from dltop.profiles.loader import parse

PROMPTS = ["one two three", "w " * 10, "x " * 50, "one two three"]
"""Four prompts: three short (one repeated), one of 50 words."""


def dataset(tmp: Path) -> Path:
    path = tmp / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": p.strip()}) + "\n" for p in PROMPTS))
    return path


@pytest.mark.parametrize(("tokenize", "by"), [(True, "tokenize"), (False, "words")])
def test_longer_dataset_prompts_are_dropped_before_the_load(
        tmp_path: Path, fake_server, tokenize: bool, by: str) -> None:
    log = tmp_path / "prompts.jsonl"
    url = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--log", str(log),
                      *(["--tokenize"] if tokenize else []))
    job = spec(url, "steady", iterations=20, warmup=0, options={
        "dataset": str(dataset(tmp_path)), "max_prompt_tokens": 10})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    sent = [json.loads(line)["prompt"] for line in log.read_text().splitlines()]
    assert len(sent) == 20 and max(len(p.split()) for p in sent) == 10  # the 10 kept
    (summary,) = named(events, "load")
    assert (summary["dataset_prompts"], summary["dropped_prompts"],
            summary["prompt_count_by"]) == (4, 1, by)


def test_a_dataset_with_no_prompt_left_fails_before_a_request(tmp_path: Path,
                                                              fake_server) -> None:
    url = fake_server("--tokenize")
    job = spec(url, "steady", options={"dataset": str(dataset(tmp_path)),
                                       "max_prompt_tokens": 2})
    code, events, _ = run_runner(tmp_path, job)
    assert code == 3
    (error,) = named(events, "error")
    assert error["message"] == (
        "4 of 4 dataset prompts over max_prompt_tokens 2 dropped (counted by the server's "
        "/tokenize): no prompt left to send; raise max_prompt_tokens or give a dataset of "
        "shorter prompts")
    assert not named(events, "request")


@pytest.mark.parametrize(("line", "says"), [
    ('max_prompt_tokens = 0\ndataset = "d.jsonl"',
     r"matrix\[0\]\.max_prompt_tokens: expected an integer >= 1 and <= 1048576, got 0"),
    ('max_prompt_tokens = "long"\ndataset = "d.jsonl"',
     r"matrix\[0\]\.max_prompt_tokens: expected an integer >= 1 .*got 'long'"),
    ("max_prompt_tokens = 100",
     r"matrix\[0\]\.max_prompt_tokens: max_prompt_tokens filters the prompts of a "
     r"dataset: synthetic prompts are prompt_tokens long"),
])
def test_a_bad_max_prompt_tokens_names_file_and_key(tmp_path: Path, line: str,
                                                    says: str) -> None:
    dataset(tmp_path)
    text = ('[[matrix]]\nframeworks = ["openai"]\nmodels = ["m"]\nmode = "serve"\n'
            f'endpoint = "http://127.0.0.1:8000/v1"\n{line}\n')
    with pytest.raises(UserError, match=r"p\.toml: " + says):
        parse(text, str(tmp_path / "p.toml"), "p", profile_dir=tmp_path)


@pytest.mark.slow  # a dltop run: the note stored
def test_the_runs_note_counts_the_dropped_prompts(tmp_path: Path, fake_server) -> None:
    url = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    dataset(tmp_path)
    profile = tmp_path / "p.toml"
    profile.write_text(f'[[matrix]]\nframeworks = ["openai"]\nmodels = ["steady"]\n'
                       f'mode = "serve"\nendpoint = "{url}"\ndataset = "d.jsonl"\n'
                       "max_prompt_tokens = 10\niterations = 4\nwarmup = 0\nnew_tokens = 4\n")
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run",
                          "--headless", "--no-telemetry", str(profile)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert res.returncode == 0, res.stdout + res.stderr
    (note,) = sqlite3.connect(db).execute("select note from runs").fetchone()
    assert "1 of 4 dataset prompts over max_prompt_tokens dropped (counted by words: no " \
        "tokenizer known)" in note, note


def test_a_tokenizer_file_counts_tokens_not_words(tmp_path: Path) -> None:
    from tests.serving.test_serve_tokens import bpe

    tokens = child_module("openai_tokens")
    tok = bpe(tmp_path / "tokenizer.json")
    rare = "nite tide stoat"  # 3 words, unlike its training's: a token a letter or so
    n = len(tok.encode(rare, add_special_tokens=False).ids)
    assert n > 10
    local = tokens.Local(str(tmp_path / "tokenizer.json"))
    assert tokens.within([rare, "the and"], 10, local) == (["the and"], "tokenizer")
    assert tokens.within([rare, "the and"], 10) == ([rare, "the and"], "words")
    assert tokens.within([rare], n, local) == ([rare], "tokenizer")  # at the limit: kept
