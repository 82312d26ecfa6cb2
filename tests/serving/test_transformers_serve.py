"""Issue 41 item 5 with a real server and no download: ``server = "transformers"`` (the
preset, ``transformers serve --port {port}``) on CPU, serving a 2-layer GPT-2 of random
weights and a word-level tokenizer that the test saves with ``save_pretrained``; and the
real server's 422 to a length field it does not know (item 3), stored naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from tests.dltop_env import query

# One worker builds the model once for both tests (an interpreter importing torch and
# transformers, ~5 s): under `make test`'s --dist loadgroup, once per worker otherwise.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("transformers_serve")]

MAKE = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
words = ["<unk>", "<eos>"] + ["w%d" % i for i in range(200)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>",
                               bos_token="<eos>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
import torch
torch.manual_seed(0)  # the same random weights every run: their answers are the same too
cfg = GPT2Config(vocab_size=len(words), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                 eos_token_id=1, bos_token_id=1)
GPT2LMHeadModel(cfg).save_pretrained(sys.argv[1])
fast.save_pretrained(sys.argv[1])
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's folder (the servers only read it)."""
    folder = tmp_path_factory.mktemp("model") / "gpt2-2l"
    subprocess.run([sys.executable, "-c", MAKE, str(folder)], check=True, timeout=120,
                   capture_output=True)
    return folder


def _serve(tmp_path: Path, model: Path, head: str = "", server: str = "transformers") -> Path:
    """A serve campaign of ``server`` on the tiny ``model``; its database."""
    # Prompts in the model's own words: dltop's synthetic words are all <unk> to this
    # tokenizer, and from <unk> the random model may answer only special tokens, which
    # the server skips (no content: the run failed on some random weights, not others).
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'"w{i} w{i + 1} w{i + 2} w{i + 3}"\n' for i in range(8)))
    profile = tmp_path / "tf.toml"
    profile.write_text(f"""{head}[[matrix]]
frameworks = ["openai"]
mode = "serve"
models = ["{model}"]
server = "{server}"
dataset = "{prompts}"
new_tokens = 8
prompt_tokens = 4
iterations = 3
warmup = 1
timeout_s = 150
""")
    db = tmp_path / "d.db"
    # the preset finds `transformers` on PATH: the venv's, whether it is activated or not
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0", "HF_HUB_OFFLINE": "1",
           "PATH": path}
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                         capture_output=True, text=True, timeout=400, env=env)
    assert "Traceback" not in res.stderr, res.stderr
    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(model) in " ".join(p.info["cmdline"] or ())]
    return db


def test_transformers_serve_started_by_dltop(tmp_path: Path, model: Path) -> None:
    db = _serve(tmp_path, model)
    (run,) = query(db, "select id, status, error_message, server_cold_start_s, log_path, "
                   "length_forced, short_requests, note from runs")
    log = Path(run["log_path"]).with_name("server.log")
    assert run["status"] == "ok", (run, log.read_text()[-3000:])
    assert 0 < run["server_cold_start_s"] < 300
    reqs = query(db, "select status, error, output_tokens, tokens_estimated from "
                 "serve_requests order by idx")
    # the usage the server reports: 8 tokens each (max_tokens), counted, not estimated
    assert [(r["status"], r["error"], r["output_tokens"], r["tokens_estimated"])
            for r in reqs] == [(200, None, 8, 0)] * 4
    assert "Uvicorn running on http://127.0.0.1:" in log.read_text() or \
        "POST /v1/chat/completions" in log.read_text()
    # no length field sent (it refuses them): the run says its lengths were not forced
    assert (run["length_forced"], run["short_requests"]) == (0, 0)
    assert run["note"] == "lengths not forced: 0 of 3 shorter than new_tokens"


def test_a_length_field_transformers_serve_refuses_is_an_error_naming_it(
        tmp_path: Path, model: Path) -> None:
    # a table that claims ignore_eos for the real server: it answers 422 to each request
    head = '[servers.claims]\ncommand = "transformers serve --port {port}"\n' \
        'ready_url = "http://{host}:{port}/health"\nextensions = ["ignore_eos"]\n'
    db = _serve(tmp_path, model, head, "claims")
    (run,) = query(db, "select status, error_message from runs")
    assert run["status"] == "crashed", run
    errors = {r["error"] for r in query(db, "select status, error from serve_requests")}
    assert len(errors) == 1, errors
    (error,) = errors
    assert error.startswith("HTTP 422: the server refused the request field(s) ignore_eos "
                            "(sent to force the length"), error
    assert "ignore_eos" in error.split("its answer: ")[1]  # the server's own words
