"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
from collections.abc import Callable

import psutil
import pytest


def live_in_group(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group; a zombie has ended, only its reaper lags."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, PermissionError):
            pass
    return out


@pytest.fixture
def group_members() -> Callable[[int], list[int]]:
    """Returns live processes of a process group, to assert nothing outlived a run."""
    return live_in_group
