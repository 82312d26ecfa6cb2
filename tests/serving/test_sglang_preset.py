"""The ``sglang`` preset's readiness URL as SGLang 0.5.23 on CPU answered, recorded
2026-11-29 (docs/serving.md, "Checked against real servers"): the fake server stands in
for it (``python -m sglang.launch_server --model-path {model}`` replaced by the fake, the
preset's other words kept). SGLang's ``/v1/models`` answers as soon as its HTTP server
listens, while its own warm-up request still runs; its ``/health`` answers 503 until that
request is done. Polled at ``/v1/models``, the cold start ended before the server was
ready and the first requests raced its warm-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.dltop_env import query

from dltop.profiles.servers import PRESETS

pytestmark = pytest.mark.slow

FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"
WARM_UP_S = 3.0


def test_the_sglang_preset_waits_for_the_server_s_own_warm_up(tmp_path: Path) -> None:
    preset = PRESETS["sglang"]
    start = "python -m sglang.launch_server --model-path {model}"
    assert preset.command.startswith(start + " ")
    command = preset.command.replace(start, f"{sys.executable} {FAKE}")
    # SGLang's answers: a BOS in usage's prompt count, /tokenize as vLLM's, an EOS token
    # of its own, both length fields honoured
    tail = f" --warm-up-s {WARM_UP_S:g} --bos 1 --tokenize --eos-after 2 --eos-token"
    profile = tmp_path / "sglang.toml"
    profile.write_text(f"""[servers.sglang-fake]
command = "{command}{tail}"
ready_url = "{preset.ready_url}"
extensions = {list(preset.extensions)!r}
[servers.models-url]
command = "{command}{tail}"
ready_url = "http://{{host}}:{{port}}/v1/models"
extensions = {list(preset.extensions)!r}
[defaults]
frameworks = ["openai"]
mode = "serve"
new_tokens = 4
prompt_tokens = 5
iterations = 3
warmup = 1
timeout_s = 40
[[matrix]]
models = ["steady"]
server = ["sglang-fake", "models-url"]
""")
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert "Traceback" not in res.stderr, res.stderr
    runs = query(db, "select status, token_source, length_forced, short_requests, "
                 "server_cold_start_s from runs order by id")
    health, models_url = runs
    for run in runs:
        assert (run["status"], run["token_source"], run["length_forced"],
                run["short_requests"]) == ("ok", "usage", 1, 0), run
    # ready once /health answered: after the warm-up, not before
    assert WARM_UP_S <= health["server_cold_start_s"] < WARM_UP_S + 20
    # what polling /v1/models measured: the HTTP server listening, the warm-up not done
    assert models_url["server_cold_start_s"] < WARM_UP_S
