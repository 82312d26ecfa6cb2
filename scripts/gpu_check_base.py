"""What gpu_check.py and its serve step share: a step's record, the time-limited process
runner, and the CPU stand-ins for the GPU profiles (scripts/gpu_check.py's docstring)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

CPU_PROFILE = """
name = "gpu-check-cpu"
description = "gpu_check.py without a GPU: the plumbing on one CPU thread"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [16]
devices = ["cpu:1"]
iterations = 3
warmup = 1
timeout_s = 120
"""

CPU_LLM_PROFILE = """
name = "gpu-check-llm-cpu"
description = "gpu_check.py without a GPU: the transformer plumbing on one CPU thread"
[defaults]
frameworks = ["torch"]
models = ["gpt-tiny"]
devices = ["cpu:1"]
iterations = 3
warmup = 1
timeout_s = 120
[[matrix]]
batch_sizes = [2]
seq_len = 32
[[matrix]]
batch_sizes = [1]
mode = "generate"
prompt_tokens = 8
new_tokens = 4
"""

TF_PROFILE = """
name = "gpu-check-tf"
description = "gpu_check.py: the TensorFlow runner on gpu:1"
[[matrix]]
frameworks = ["tensorflow"]
models = ["fcn-r", "alexnet-r", "resnet-56"]
batch_sizes = [256]
devices = ["gpu:1"]
iterations = 20
warmup = 5
timeout_s = 150
"""


@dataclass
class Step:
    """One step's outcome, as steps.json and the report's table show it."""

    name: str
    status: str  # ok | failed | timeout | skipped
    seconds: float
    note: str = ""
    error: str = ""


@dataclass
class Proc:
    rc: int | None
    out: str
    err: str
    timed_out: bool


def call(argv: list[str], timeout: float, cwd: Path | None = None) -> Proc:
    """Run ``argv`` in its own session; on timeout TERM its group, KILL 15 s later."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=cwd)
    try:
        out, err = p.communicate(timeout=max(1.0, timeout))
        return Proc(p.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
            try:
                out, err = p.communicate(timeout=wait)
                return Proc(p.returncode, out, err, True)
            except subprocess.TimeoutExpired:
                continue
        return Proc(None, "", "", True)


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class StepTimeout(Exception):
    """A step ran out of its time limit."""
