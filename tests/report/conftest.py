"""Fixtures of the report tests: a real database of stored campaigns (reportdb.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .reportdb import build_report_db


@pytest.fixture
def report_db(tmp_path: Path) -> Path:
    """A database file with the CPU campaign (1) and the simulated-GPU campaign (2)."""
    return build_report_db(tmp_path / "report.db")
