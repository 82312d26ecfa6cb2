"""Issue 30's target for item 2, end to end: a CPU campaign on a host of FAKE GPUs
(``--fake-gpus``, labelled simulated) at the default sampling rates, one configuration
with ``iterations = 5`` (a window far under a second) and one long enough. Every
telemetry cell of the summary is a figure standing on enough readings, or ``n/a`` with
the window and the count: never a number from one reading.

Real ``dltop run`` and ``dltop export`` processes, the command runner over
tests/programs/cmd_seconds.py (steps of 20-40 ms), a real database.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltop.telemetry.readings import MIN_HOST_READINGS, MIN_WINDOW_S

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).resolve().parent.parent / "programs" / "cmd_seconds.py"
PROFILE = """
name = "readings"
[defaults]
warmup = 1
timeout_s = 60
iteration_regex = 'took (?P<seconds>[0-9.]+)s'
command = [{python}, {program}, "-1"]
[[matrix]]
frameworks = ["command"]
models = ["short-net"]
batch_sizes = [8]
devices = ["cpu:1"]
iterations = 5
[[matrix]]
frameworks = ["command"]
models = ["long-net"]
batch_sizes = [8]
devices = ["cpu:1"]
iterations = 100
"""
HOST = ("host-memory", "cpu", "host-cpu", "host-user", "host-system", "host-iowait")
GPU = ("power", "energy", "gpu-memory", "gpu-memory-device")


def _dltop(tmp_path: Path, *args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "dltop", *args, "--db", str(tmp_path / "d.db")],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr + res.stdout
    return res.stdout


def test_every_telemetry_cell_has_enough_readings_or_says_how_few(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(python=json.dumps(sys.executable),
                                   program=json.dumps(str(PROGRAM))))
    _dltop(tmp_path, "run", str(prof), "--headless", "--fake-gpus", "1")
    conn = sqlite3.connect(tmp_path / "d.db")
    conn.row_factory = sqlite3.Row
    runs: dict[str, Any] = {r["model"]: dict(r) for r in conn.execute(
        "select j.model, r.status, r.window_s, r.gpu_readings, r.host_readings "
        "from runs r join jobs j on j.id = r.job_id")}
    conn.close()
    assert {m: r["status"] for m, r in runs.items()} == {"short-net": "ok", "long-net": "ok"}
    short, long = runs["short-net"], runs["long-net"]
    assert short["window_s"] < MIN_WINDOW_S <= long["window_s"]
    assert short["gpu_readings"] is None  # a CPU run holds no GPU: nothing to count
    assert long["host_readings"] >= MIN_HOST_READINGS  # ~3 s at 2 Hz

    doc = json.loads(_dltop(tmp_path, "export", "--table", "summary", "--format", "json"))
    rows = {row["model"]: row for row in doc["rows"]}
    n = short["host_readings"]
    said = (f"n/a: window {short['window_s']:.2g} s, {n} reading{'' if n == 1 else 's'} "
            "(set min_time_s)")
    for name in HOST:
        assert rows["short-net"]["detail"][name]["readings"] == n
        if name == "host-memory" and rows["short-net"][name] is not None:
            continue  # the kernel's peak RSS (wait4): exact whatever the window
        assert rows["short-net"][name] is None and rows["short-net"]["reasons"][name] == said
        # the long run's figure is a number, with the readings behind it
        assert rows["long-net"]["detail"][name]["readings"] == long["host_readings"]
    for name in ("host-memory", "cpu", "host-cpu", "host-user", "host-system"):
        assert isinstance(rows["long-net"][name], float), name
    for model in rows:
        for name in GPU:
            if name == "energy":  # a CPU run's energy is RAPL's: a figure, or why not
                assert rows[model][name] is not None or "RAPL" in rows[model]["reasons"][name] \
                    or rows[model]["reasons"][name] == said, rows[model]["reasons"][name]
                continue
            assert rows[model]["reasons"][name] == "n/a: no GPU"

    csv = _dltop(tmp_path, "export", "--table", "summary", "--format", "csv")
    assert "RSS MiB readings" in csv and said in csv
