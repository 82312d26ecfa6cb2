"""``dltop run --detach``: the engine outlives the command; ``dltop status`` follows it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROFILE = """
name = "bg"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [8]
devices = ["cpu:1"]
iterations = {iterations}
warmup = 1
"""


def dltop(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")},
                          timeout=120)


def test_detached_engine_runs_to_the_end(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(iterations=60))
    t0 = time.monotonic()
    res = dltop(tmp_path, "run", str(prof), "--detach")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 15  # returned long before the campaign ends
    assert "engine started in the background" in res.stdout
    seen_running = False
    deadline = time.monotonic() + 180
    while True:
        st = dltop(tmp_path, "status")
        assert st.returncode == 0, st.stderr
        if "iteration" in st.stdout and "engine pid" in st.stdout:
            seen_running = True
        if "no engine running" in st.stdout:
            break
        assert time.monotonic() < deadline, st.stdout
        time.sleep(0.5)
    assert seen_running
    assert "finished" in st.stdout
    conn = sqlite3.connect(tmp_path / "d.db")
    assert conn.execute("select status from runs").fetchall() == [("ok",), ("ok",)]
    conn.close()
    assert list((tmp_path / "d-runs").glob("engine-*.log"))


def test_detach_refuses_bad_input_in_the_foreground(tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", str(tmp_path / "missing.toml"), "--detach")
    assert res.returncode == 2 and "no such profile" in res.stderr
    assert not (tmp_path / "d.db").exists()
