"""Issue 41: ``dataset = PATH`` in the shapes users have (ShareGPT with a first turn not
human and empty conversations, OpenAI ``messages``, a UTF-8 BOM, gzip, blank lines) gives
the right prompts, sent as such; a file that gives none (a garbled line, not UTF-8, no
known key, a cut gzip) exits 2 naming the file, the key and the line, nothing stored."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.childfiles import child_module
from dltop.errors import UserError
from dltop.profiles.loader import parse

SHAREGPT = [
    {"id": "gpt-first", "conversations": [
        {"from": "gpt", "value": "Hello, how can I help?"},
        {"from": "human", "value": "What is the capital of France?"},
        {"from": "gpt", "value": "Paris."}]},
    {"id": "empty", "conversations": []},
    {"id": "no-human", "conversations": [{"from": "gpt", "value": "monologue"}]},
    {"id": "plain", "conversations": [{"from": "human", "value": "Tell me a joke"}]},
]
MESSAGES = [
    {"messages": [{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "Why is the sky blue?"}]},
    {"conversation": [{"role": "assistant", "content": "hi"}]},  # LMSYS-Chat's key
    {"messages": []},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Name a prime"}]}]},
    {"conversation": [{"role": "user", "content": "Which is larger?"}]},
]
SHAREGPT_PROMPTS = ["What is the capital of France?", "Tell me a joke"]
MESSAGES_PROMPTS = ["Why is the sky blue?", "Name a prime", "Which is larger?"]


def write(path: Path, text: str, *, bom: bool = False, zipped: bool = False) -> Path:
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if zipped else data)
    return path


def read(path: Path) -> list[str]:
    return list(child_module("openai_tokens").read_dataset(str(path)))


@pytest.mark.parametrize(("text", "expected"), [
    (json.dumps(SHAREGPT), SHAREGPT_PROMPTS),
    (json.dumps(MESSAGES), MESSAGES_PROMPTS),
    ("\n".join(json.dumps(m) for m in MESSAGES) + "\n", MESSAGES_PROMPTS),
    ('{"prompt": "a b"}\n\n   \n{"text": "c d"}\r\n"e f"\n', ["a b", "c d", "e f"]),
])
@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize("zipped", [False, True])
def test_real_world_shapes_give_their_prompts(tmp_path: Path, text: str,
                                              expected: list[str], bom: bool,
                                              zipped: bool) -> None:
    assert read(write(tmp_path / "d", text, bom=bom, zipped=zipped)) == expected


PROFILE = """[[matrix]]
frameworks = ["openai"]
models = ["m"]
mode = "serve"
endpoint = "http://127.0.0.1:8000/v1"
dataset = "{name}"
"""


@pytest.mark.parametrize(("content", "says"), [
    (b'{"prompt": "ok"}\n\n{"prompt": "broken\n{"text": "x"}\n',
     r"line 3, column 12 is not JSON \(Unterminated string starting at\): "
     r"'\{\"prompt\": \"broken'"),
    (b'{"prompt": "caf\xe9"}\n', r"not UTF-8 text"),
    (b'{"question": "q"}\n{"input": "i"}\n', r"no prompt in it: expected a JSONL of prompts"),
    (b"[]", r"no prompt in it"),
    (b'[{"conversations": []},\n', r"not JSON \(Expecting value: line 2 column 1"),
    (gzip.compress(b'{"prompt": "ok"}\n' * 200, mtime=0)[:40], r"cannot be read as gzip"),
])
def test_a_dataset_without_prompts_exits_2_naming_file_key_and_line(
        tmp_path: Path, content: bytes, says: str) -> None:
    (tmp_path / "d.jsonl").write_bytes(content)
    with pytest.raises(UserError, match=r"p.toml: matrix\[0\].dataset: " +
                       str(tmp_path / "d.jsonl").replace(".", r"\.") + ": " + says):
        parse(PROFILE.format(name="d.jsonl"), str(tmp_path / "p.toml"), "p",
              profile_dir=tmp_path)


def test_a_garbled_dataset_stops_dltop_run_before_anything_is_stored(
        tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "ok"}\nnot json\n')
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(name="d.jsonl"))
    db = tmp_path / "r.db"
    r = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"{profile}: matrix[0].dataset: {tmp_path / 'd.jsonl'}: line 2, column 1 is " \
           "not JSON (Expecting value): 'not json'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not db.exists()


@pytest.mark.slow
def test_a_gzipped_sharegpt_file_with_a_bom_sends_its_human_turns(
        tmp_path: Path, fake_server) -> None:
    log = tmp_path / "prompts.log"
    url = fake_server("--ttft-ms", "2", "--itl-ms", "1", "--log", str(log))
    write(tmp_path / "share.json.gz", json.dumps(SHAREGPT), bom=True, zipped=True)
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.replace("http://127.0.0.1:8000/v1", url).format(
        name="share.json.gz") + "iterations = 8\nwarmup = 0\nnew_tokens = 4\n")
    r = subprocess.run([sys.executable, "-m", "dltop", "--db", str(tmp_path / "r.db"),
                        "run", "--headless", "--no-telemetry", str(profile)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # the progress line: a request's median e2e seconds and its own output tokens/s
    assert re.search(r"\[1/1\] openai m b1 gen128\+4 inf req/s c1 cpu:1 #1  ok  "
                     r"[0-9.]+ s/request  [0-9.]+ tokens/s per request", r.stdout), r.stdout
    sent = [json.loads(line)["prompt"] for line in log.read_text().splitlines()]
    assert len(sent) == 8
    assert set(sent) <= set(SHAREGPT_PROMPTS), sent
