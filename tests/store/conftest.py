"""An in-memory store per test, and job specs to fill it (each test runs in milliseconds)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.store import Store, connect, memory_db


def make_jobs(n: int, profile: str = "p") -> tuple[JobSpec, ...]:
    """``n`` CPU jobs of one framework, batch sizes 1..n, in that order."""
    sizes = ", ".join(str(b) for b in range(1, n + 1))
    return parse(f'[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                 f'batch_sizes = [{sizes}]\ndevices = ["cpu:1"]\n',
                 f"{profile}.toml", profile).jobs


def campaign(store: Store, n: int = 3, *, pack: bool = False) -> tuple[int, list[int]]:
    """A campaign of ``n`` queued jobs: its id and the job ids in queue order."""
    cid = store.create_campaign("c", ["p.toml"], ["dltop", "run"], "host", 1, None, pack=pack)
    return cid, store.add_jobs(cid, make_jobs(n))


def statuses(store: Store, cid: int) -> list[tuple[int, str]]:
    """(position, status) of the campaign's jobs in queue order."""
    return [(r["position"], r["status"]) for r in store.db.query(
        "select position, status from jobs where campaign_id = ? order by position", [cid])]


@pytest.fixture
def store() -> Store:
    return Store(memory_db())


@pytest.fixture
def file_stores(tmp_path: Path) -> Callable[[], Store]:
    """Opens a new connection to one database file, as another process would."""
    path = tmp_path / "d.db"
    return lambda: Store(connect(path))
