"""The ``llama-cpp`` preset's command and readiness URL as llama.cpp 0c1e570 llama-server
answered, recorded 2026-11-29 (docs/serving.md, "Checked against real servers"): the fake
server stands in for it (``llama-server -m {model}`` replaced by the fake, the preset's
other words kept). Its ``/v1/models`` needs the ``--api-key`` key, which a readiness poll
does not send, while ``/health`` never does. And its connections: it closes each after
its stream while its headers say keep-alive, so that a request taking one from the client's
pool met the close (1 to 3 of 14 requests at concurrency 4 failed before the fix)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from tests.dltop_env import query

from dltop.jobs.protocol import EventChecker
from dltop.jobs.serving import ServeExtras
from dltop.profiles.servers import PRESETS

from .conftest import named, run_runner, spec

pytestmark = pytest.mark.slow

FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"


def test_the_llama_cpp_preset_is_ready_behind_an_api_key(
        tmp_path: Path) -> None:
    preset = PRESETS["llama-cpp"]
    assert preset.command.startswith("llama-server -m {model} ")
    command = preset.command.replace("llama-server -m {model}", f"{sys.executable} {FAKE}")
    tail = " --api-key k3y --tokenize llama.cpp"
    profile = tmp_path / "llama.toml"
    profile.write_text(f"""[servers.llama]
command = "{command}{tail}"
ready_url = "{preset.ready_url}"
extensions = {list(preset.extensions)!r}
[servers.models-url]
command = "{command}{tail}"
ready_url = "http://{{host}}:{{port}}/v1/models"
timeout_s = 3
[defaults]
frameworks = ["openai"]
mode = "serve"
new_tokens = 4
prompt_tokens = 5
iterations = 3
warmup = 1
timeout_s = 40
api_key_env = "LLAMA_KEY"
[[matrix]]
models = ["steady"]
server = ["llama", "models-url"]
""")
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0",
                              "LLAMA_KEY": "k3y"})
    assert "Traceback" not in res.stderr, res.stderr
    runs = query(db, "select status, error_message, token_source, server_cold_start_s "
                 "from runs order by id")
    ok, models_url = runs
    assert ok["status"] == "ok", ok
    assert ok["token_source"] == "usage"
    assert 0 < ok["server_cold_start_s"] < 30  # ready at /health, polled without the key
    # the default readiness URL, polled without the key, never saw it ready
    assert models_url["status"] == "setup_failed"
    assert models_url["error_message"].startswith("server not ready at http://127.0.0.1:")
    assert "/v1/models after 3 s (timeout_s)" in models_url["error_message"]


def test_a_pooled_connection_the_server_closed_is_not_a_failed_request(
        tmp_path: Path, fake_server) -> None:
    url = fake_server("--close-after-stream", "--ttft-ms", "0", "--itl-ms", "0")
    job = spec(url, "steady", iterations=60, warmup=0, new_tokens=4, concurrency=4,
               options={"api": "completions"})
    code, events, err = run_runner(tmp_path, job)
    assert code == 0, err
    reqs = named(events, "request")
    assert len(reqs) == 60
    assert [r["error"] for r in reqs if r["error"]] == []
    assert {r["output_tokens"] for r in reqs} == {4}
    # the requests sent again are counted in the load (the run's note names them)
    load, = named(events, "load")
    assert isinstance(load["resent_requests"], int) and load["resent_requests"] >= 0
    assert EventChecker().problem({**load, "resent_requests": -1}) is not None
    # ...and each request says how often it went again and how long its first sends took
    assert sum(r["resent"] for r in reqs) == load["resent_requests"]
    assert all((r["resent"] > 0) == (r["resend_s"] > 0) for r in reqs), reqs
    assert all(0 <= r["resend_s"] < 5 for r in reqs)
    first = reqs[0]
    checker = EventChecker()
    assert checker.problem({**first, "resent": -1}) is not None
    assert checker.problem({**first, "index": 1000, "resend_s": float("nan")}) is not None
    assert checker.problem({**first, "index": 1001, "resent": 2, "resend_s": 0.25}) is None


def test_requests_sent_again_are_named_in_the_run_s_note() -> None:
    load = {"v": 1, "event": "load", "window_s": 1.0, "client_cpu_s": 0.1, "ok": 40}
    extras = ServeExtras(1, cast(Any, None), lambda *a, **k: None)
    extras.on_event({**load, "resent_requests": 2, "short_requests": 0,
                     "length_forced": True})
    assert extras.fields()["note"] == (
        "2 measured requests sent again: the server closed a kept-alive connection "
        "before answering (times from the answered send)")
    extras.on_event({**load, "resent_requests": 0, "short_requests": 0,
                     "length_forced": True})
    assert "note" not in extras.fields()
