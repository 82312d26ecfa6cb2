"""A pause takes effect after the runs going on: the campaign is `paused` only once they
ended (a viewer shows "pausing after run N" until then), and a one-run cancel (the TUI's
`c`) ends exactly the run it names."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dltop.store import Store, connect

pytestmark = pytest.mark.slow

PROFILE = """
name = "pause"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
repeats = 2
iterations = 1000000
warmup = 1
timeout_s = 600
"""


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_paused_only_after_the_run_ends(tmp_path: Path, wait_until: Any) -> None:
    db = tmp_path / "d.db"
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE)
    env = {**os.environ, "DLTOP_DB": str(db)}
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the first run is measuring
            e = json.loads(line)
            if e["event"] == "iteration" and e.get("index", 0) >= 3:
                break
        res = subprocess.run([sys.executable, "-m", "dltop", "pause"], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        # The engine reads the request within 0.5 s; watch well past that.
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            assert query(db, "select status, control from campaigns") == [("running", "pause")]
            assert query(db, "select status from runs") == [("running",)]
            time.sleep(0.1)
        (run_id,) = query(db, "select id from runs")[0]
        assert Store(connect(db)).edits.cancel_run(1, run_id).changed == 1
        wait_until(lambda: query(db, "select status from campaigns") == [("paused",)], 120,
                   "the campaign to be paused once its run ended", interval_s=0.1)
        assert query(db, "select status from runs") == [("cancelled",)]  # none started since
        assert query(db, "select status from jobs order by id") == [("cancelled",), ("queued",)]
        res = subprocess.run([sys.executable, "-m", "dltop", "cancel"], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
