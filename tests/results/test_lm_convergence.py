"""Language-model convergence through the real engine: gpt-tiny (PyTorch) on PTB, its
perplexity and time-to-perplexity in the exports (issue 29: ``data = "real"``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROFILE = """
name = "lm-ptb"
[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [4]
devices = ["cpu:1"]
seq_len = 32
data = "real"
data_dir = "{data}"
iterations = 6
warmup = 1
eval_every = 3
target_perplexity = {target}
timeout_s = 240
"""


def _dltop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=300)


def _cell(db: Path, metric: str) -> dict[str, object]:
    res = _dltop("export", "--db", str(db), "--metric", metric, "--format", "json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["rows"]
    cell: dict[str, object] = row["cells"]["cpu:1"]
    return cell


@pytest.mark.slow
def test_gpt_tiny_on_ptb_reports_perplexity_and_time_to_perplexity(tmp_path: Path) -> None:
    data = tmp_path / "ptb"
    made = _dltop("data", "synth", "ptb", str(data), "--train", "20000", "--test", "2000")
    assert made.returncode == 0, made.stderr
    prof, db = tmp_path / "p.toml", tmp_path / "d.db"
    # Any perplexity is at or below 1e9: the first evaluation reaches it.
    prof.write_text(PROFILE.format(data=data, target=1e9))
    res = _dltop("run", str(prof), "--db", str(db), "--headless")
    assert res.returncode == 0, res.stdout + res.stderr
    ppl = _cell(db, "perplexity")
    assert isinstance(ppl["value"], float) and 1.0 < ppl["value"] < 20000.0
    ttp = _cell(db, "time-to-perplexity")
    assert isinstance(ttp["value"], float) and ttp["value"] > 0
    assert ttp["reached"] == 1.0 and isinstance(ttp["eval_s"], float)


def test_target_perplexity_without_evaluations_is_refused(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.format(data=tmp_path, target=100).replace("eval_every = 3\n", ""))
    res = _dltop("profiles", "show", str(prof))
    assert res.returncode == 2
    assert "target_perplexity needs evaluations" in res.stderr and "p.toml" in res.stderr
