"""The streaming fake OpenAI server (tests/programs/fake_openai.py) as a fixture, and the
``openai`` runner run by hand on a spec (its events read from stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dltop.runners.registry import CHILD_DIR

FAKE = Path(__file__).resolve().parents[1] / "programs" / "fake_openai.py"
RUNNER = CHILD_DIR / "openai_runner.py"


def start_fake(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start the fake server; (its process, its base URL ending in /v1)."""
    proc = subprocess.Popen([sys.executable, str(FAKE), *args], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.startswith("PID "):
        line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1"


@pytest.fixture
def fake_server() -> Iterator[Callable[..., str]]:
    """Start fake servers (``fake_server("--ttft-ms", "30")`` → URL); stopped after."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        proc, url = start_fake(*args)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def spec(endpoint: str, model: str, **over: Any) -> dict[str, Any]:
    """A job spec as the engine writes it for an ``openai`` job."""
    out: dict[str, Any] = {
        "v": 1, "run_id": 1, "framework": "openai", "model": model, "batch_size": 1,
        "device": {"kind": "cpu", "count": 1}, "iterations": 6, "warmup": 1, "seed": 0,
        "prompt_tokens": 8, "new_tokens": 8, "request_rate": "inf", "concurrency": 2,
        "timeout_s": 20.0, "mode": "serve",
        "options": {"endpoint": endpoint, "api": "chat", "arrival": "poisson",
                    "max_error_rate": 0.05, "burstiness": 1.0}}
    opts = over.pop("options", {})
    out.update(over)
    out["options"].update(opts)
    return out


def run_runner(tmp: Path, job: dict[str, Any], env: dict[str, str] | None = None,
               timeout: float = 60) -> tuple[int, list[dict[str, Any]], str]:
    """Run the runner on ``job``: (exit status, its events, its stderr's other lines)."""
    path = tmp / f"spec-{job['model']}.json"
    path.write_text(json.dumps(job))
    base = {k: v for k, v in os.environ.items() if k != "DLTOP_EVENT_FD"}
    res = subprocess.run([sys.executable, str(RUNNER), str(path)], capture_output=True,
                         text=True, timeout=timeout, env={**base, **(env or {})})
    events, other = [], []
    for line in res.stderr.splitlines():
        if line.startswith('{"'):
            events.append(json.loads(line))
        else:
            other.append(line)
    return res.returncode, events, "\n".join(other)


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


SLO_FAKE = ("--serial", "--ttft-ms", "30", "--itl-ms", "2")
"""The fake of the slo table's sweeps: one request at a time, ~38 ms each, so that 10 and
20 req/s meet a 150 ms TTFT SLO by ~120 ms (a margin a loaded machine keeps) and a burst's
fifth request and later queue past it."""
SLO_PROFILE = """name = "{name}"
[defaults]
frameworks = ["openai"]
mode = "serve"
endpoint = "{url}"
new_tokens = 4
prompt_tokens = 4
iterations = 8
warmup = 1
timeout_s = 30
concurrency = 16
arrival = "constant"
"""
SLO_MATRIX = """[[matrix]]
models = ["steady"]
request_rate = {rates}
{slo}
"""


def slo_campaign(db: Path, tmp: Path, name: str, url: str, *matrices: tuple[str, str],
                 timeout_s: float = 120) -> None:
    """A real serve campaign ``name`` into ``db`` against the fake at ``url``: a matrix
    entry per (request_rate list, SLO lines); no telemetry (another process on this shared
    host would mark a run contaminated)."""
    profile = tmp / f"{name}.toml"
    profile.write_text(SLO_PROFILE.format(name=name, url=url) + "".join(
        SLO_MATRIX.format(rates=rates, slo=slo) for rates, slo in matrices))
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--db", str(db),
                          "--no-telemetry", str(profile)], capture_output=True, text=True,
                         timeout=timeout_s, env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr


OVERHEAD_HEAD = """name = "{name}"
[defaults]
prompt_tokens = 8
new_tokens = 8
devices = ["cpu:1"]
timeout_s = 60
"""
OVERHEAD_GEN = """[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
mode = "generate"
batch_sizes = {batches}
new_tokens = {new}
iterations = 10
warmup = 2
"""
OVERHEAD_SERVE = """[[matrix]]
frameworks = ["openai"]
mode = "serve"
models = ["{model}"]
endpoint = "{url}"
concurrency = {conc}
iterations = 10
warmup = 1
{extra}
"""


def overhead_campaign(db: Path, tmp: Path, name: str, *entries: str) -> None:
    """A real campaign ``name`` into ``db`` of these entries (the overhead table's: gpt-tiny
    generate runs beside serve runs of the fake), no telemetry."""
    profile = tmp / f"{name}.toml"
    profile.write_text(OVERHEAD_HEAD.format(name=name) + "".join(entries))
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--db", str(db),
                          "--no-telemetry", str(profile)], capture_output=True, text=True,
                         timeout=180, env={**os.environ, "DLTOP_DEFAULT_MIN_TIME_S": "0"})
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
