"""A real generate run's tokens through the real engine (issue 42 item 4): PyTorch gpt-tiny's
greedy output is not degenerate, and the stored distinct-token fraction equals the one
recomputed from its stored requests and the summary's cell."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import distinct_fraction

PROFILE = """
name = "lm-tokens"
[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [2]
devices = ["cpu:1"]
mode = "generate"
prompt_tokens = 16
new_tokens = 32
iterations = 2
warmup = 1
timeout_s = 240
"""


def _dltop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_stored_distinct_fraction_is_the_recomputed_one_and_not_degenerate(
        tmp_path: Path) -> None:
    prof, db = tmp_path / "p.toml", tmp_path / "d.db"
    prof.write_text(PROFILE)
    res = _dltop("run", str(prof), "--db", str(db), "--headless")
    assert res.returncode == 0, res.stdout + res.stderr
    conn = sqlite3.connect(db)
    try:
        (run_id, stored), = conn.execute("select id, distinct_token_frac from runs").fetchall()
        rows = conn.execute("select warmup, batch, new_tokens, distinct_tokens from "
                            "generations where run_id = ? order by idx", [run_id]).fetchall()
    finally:
        conn.close()
    assert len(rows) == 3 and all(d is not None for *_, d in rows)
    assert stored == distinct_fraction([(bool(w), b, n, d) for w, b, n, d in rows])
    # one token repeated would read 1/32: greedy tokens of the generation init vary
    assert stored > 0.5
    out = _dltop("export", "--db", str(db), "--table", "summary", "--format", "json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    assert row["distinct-tokens"] == pytest.approx(stored)
