"""``dltop run --detach``: the engine outlives the command; ``dltop status`` follows it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.dltop_env import campaign_status

pytestmark = pytest.mark.slow

def dltop(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")},
                          timeout=120)


def status_of(tmp_path: Path) -> str | None:
    """The campaign's status; None before the engine has written one (read-only look)."""
    return campaign_status(tmp_path / "d.db")


STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"


def test_detached_engine_runs_to_the_end(tmp_path: Path, wait_until: Any,
                                         profile_text: Any) -> None:
    # The engine is under test: two runs of a program of 50 ms steps (tests/programs).
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({"frameworks": ["command"], "models": ["first", "second"],
                                  "batch_sizes": [8], "devices": ["cpu:1"], "iterations": 60,
                                  "warmup": 1,
                                  "command": [sys.executable, str(STEPS), "{total}", "0.05"]},
                                 name="bg"))
    res = dltop(tmp_path, "run", str(prof), "--detach")
    assert res.returncode == 0, res.stderr
    assert "engine started in the background" in res.stdout
    # The command returned while the campaign goes on: shown by the database, not the clock.
    assert status_of(tmp_path) != "finished"
    seen: list[str] = []

    def engine_gone() -> bool:
        st = dltop(tmp_path, "status")
        assert st.returncode == 0, st.stderr
        seen.append(st.stdout)
        return "no engine running" in st.stdout

    wait_until(engine_gone, 240, "the detached engine to finish", interval_s=0.5)
    assert any("iteration" in out and "engine pid" in out for out in seen), seen
    assert "finished" in seen[-1]
    conn = sqlite3.connect(tmp_path / "d.db")
    assert conn.execute("select status from runs").fetchall() == [("ok",), ("ok",)]
    conn.close()
    assert list((tmp_path / "d-runs").glob("engine-*.log"))


def test_detach_refuses_bad_input_in_the_foreground(tmp_path: Path) -> None:
    res = dltop(tmp_path, "run", str(tmp_path / "missing.toml"), "--detach")
    assert res.returncode == 2 and "no such profile" in res.stderr
    assert not (tmp_path / "d.db").exists()
