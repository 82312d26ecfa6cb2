"""benchmarks/suite_cpu.py: the census docs/development.md's suite figures come from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "suite_cpu.py"
BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_a_busy_child_is_counted_by_kind_and_the_exit_code_passes_through() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--interval-s", "0.1", "--",
                          sys.executable, "-c", BUSY + "raise SystemExit(3)"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, res.stderr
    assert "exit 3" in res.stdout
    rows = [line.split() for line in res.stdout.splitlines() if line.endswith("other Python")]
    assert rows and float(rows[0][0]) >= 0.5, res.stdout  # at least half the loop seen


def test_no_command_is_a_usage_error() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "give the command after --" in res.stderr
