"""The README's three questions (issue 40): each command runs as written over the
committed databases and prints the answer's rows, so the front page stays true."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # three dltop processes over the committed databases

ROOT = Path(__file__).resolve().parents[2]


def tour_commands() -> list[list[str]]:
    """The ``dltop`` commands of the README's questions block, ``$R`` expanded."""
    text = (ROOT / "README.md").read_text()
    block = text.split("Questions answered in one command each", 1)[1].split("```sh", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    r = re.search(r"^R=(\S+)$", block, re.M)
    assert r, "the block sets R"
    return [shlex.split(line.replace("$R", r.group(1)))
            for line in block.splitlines() if line.startswith("dltop ")]


def test_the_readme_questions_run_as_written() -> None:
    commands = tour_commands()
    assert len(commands) == 3
    out = []
    for argv in commands:
        res = subprocess.run([sys.executable, "-m", "dltop", *argv[1:]], cwd=ROOT,
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        assert res.returncode == 0 and "Traceback" not in res.stderr, (argv, res.stderr)
        out.append(res.stdout)
    frugal, compiled, graphs = out
    rows = [line for line in frugal.splitlines() if line.startswith("| ")][2:]
    assert rows and all(line.startswith("| resnet-50 |") for line in rows)
    assert "J/sample" in frugal.splitlines()[2]
    assert "| mfu | % |" in compiled and "| throughput | tokens/s |" in compiled
    assert "| ttft |" in graphs and "| tpot |" in graphs
    assert "inconclusive: one run" in graphs  # as the README says of single runs
