"""Campaigns of finished runs in a real database, built the way the engine stores them.

The results tests take the ``campaigns`` fixture (a :class:`CampaignMaker`): a matrix
profile, a campaign of its jobs, runs with their iterations and summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import sqlite_utils

from dltop.catalog import RunStatus
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.results.stats import summarize_run
from dltop.store import Store


class CampaignMaker:
    """Builds campaigns in any database (in memory, or a file the CLI then reads)."""

    @staticmethod
    def profile(name: str, devices: Sequence[str], *, batch_sizes: Sequence[int] = (8,),
                models: Sequence[str] = ("fcn-r",), repeats: int = 1) -> str:
        """A one-matrix torch profile's TOML text."""
        def arr(xs: Sequence[object]) -> str:
            return "[" + ", ".join(f'"{x}"' if isinstance(x, str) else str(x) for x in xs) + "]"

        return (f'name = "{name}"\n[defaults]\nrepeats = {repeats}\n[[matrix]]\n'
                f'frameworks = ["torch"]\nmodels = {arr(models)}\n'
                f"batch_sizes = {arr(batch_sizes)}\ndevices = {arr(devices)}\n")

    @staticmethod
    def create(db: sqlite_utils.Database, profile: str,
               name: str = "c") -> tuple[int, list[tuple[JobSpec, int]]]:
        """Store a campaign of the profile's jobs: its id, and each job with its id."""
        store = Store(db)
        jobs = parse(profile, f"{name}.toml", name).jobs
        cid = store.create_campaign(name, [f"{name}.toml"], ["dltop"], "h", 1, None)
        return cid, list(zip(jobs, store.add_jobs(cid, jobs), strict=True))

    @staticmethod
    def add_run(db: sqlite_utils.Database, cid: int, job_id: int,
                seconds: Sequence[float | tuple[float, int, int]], samples: int = 8, *,
                status: str = RunStatus.OK, iterations: bool = True,
                fields: dict[str, Any] | None = None) -> int:
        """A finished run of iterations of ``samples`` samples, its summary from them.

        An iteration is its seconds, or ``(seconds, samples, warmup)``; warm-up ones are
        left out of the summary. ``iterations=False`` stores only the summary (tables
        read the summary); a status other than ``ok`` stores none.
        """
        its = [s if isinstance(s, tuple) else (s, samples, 0) for s in seconds]
        store = Store(db)
        run_id = store.start_run(job_id, cid, 1, "", samples)
        if iterations:
            store.add_iterations(run_id, [{"idx": i, "seconds": s, "samples": n, "warmup": w,
                                           "loss": None} for i, (s, n, w) in enumerate(its)])
        measured = [s for s, _, w in its if not w]
        summary = summarize_run(measured, samples).to_columns() if status == RunStatus.OK \
            else {}
        store.finish_run(run_id, job_id, status, {**summary, **(fields or {})})
        return run_id


@pytest.fixture
def campaigns() -> type[CampaignMaker]:
    return CampaignMaker


def distinct_fraction(rows: Sequence[tuple[bool, int, int, int | None]]) -> float | None:
    """A generate run's ``distinct_token_frac`` recomputed from its ``generations`` rows
    (warmup, batch, new_tokens, distinct_tokens): Σ distinct / Σ batch × new_tokens over
    the measured requests that counted them; None without any."""
    counted = [(b, n, d) for warm, b, n, d in rows if not warm and d is not None]
    tokens = sum(b * n for b, n, _ in counted)
    return sum(d for _, _, d in counted) / tokens if tokens else None
