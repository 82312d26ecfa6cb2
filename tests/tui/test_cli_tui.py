"""`dltop tui` refuses databases it cannot attach to, with a clear message and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def tui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", "tui", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_foreign_sqlite_database_is_left_untouched(tmp_path: Path, foreign_sqlite: Any) -> None:
    path = foreign_sqlite(tmp_path / "other.db", "create table notes (x text)")
    before = path.read_bytes()
    r = tui("--db", str(path))
    assert r.returncode == 2 and "not a dltop database" in r.stderr
    assert path.read_bytes() == before


def test_bad_refresh_rate(tmp_path: Path) -> None:
    r = tui("--db", str(tmp_path / "x.db"), "--refresh-hz", "0")
    assert r.returncode == 2 and "--refresh-hz" in r.stderr
