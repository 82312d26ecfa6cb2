"""A run's iterations and evaluations, and what ``dltop prune`` archived of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dltop.store.archive import unpack_measured
from dltop.store.read import jobruns
from dltop.store.read.runs import by_run


def thinned(db: Any, run_id: int, every: int) -> list[dict[str, Any]]:
    """Every ``every``-th iteration of the run (by idx, the last one kept): idx, seconds,
    samples, warmup, loss, t_mono_ns."""
    return list(db.query(
        "select idx, seconds, samples, warmup, loss, t_mono_ns from iterations "
        "where run_id = ? and ((idx % ?) = 0 or idx = (select max(idx) from "
        "iterations where run_id = ?)) order by idx", [run_id, every, run_id]))


def warmup_end_ns(db: Any, run_id: int) -> int | None:
    """The end (``t_mono_ns``) of the run's last warm-up iteration, if timed."""
    (ns,) = db.execute("select max(t_mono_ns) from iterations where run_id = ? and warmup",
                       [run_id]).fetchone()
    return None if ns is None else int(ns)


def evals(db: Any, run_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each run's evaluations in order (runs without any left out; none before migration
    14): idx, epoch, accuracy, perplexity, loss, eval_s, train_s, t_mono_ns."""
    return by_run(db, run_ids, "evals",
                  "select run_id, idx, epoch, accuracy, perplexity, loss, eval_s, train_s, "
                  "t_mono_ns from evals where run_id in ({marks}) order by run_id, idx")


def archived(db: Any, run_id: int) -> list[tuple[float, int]] | None:
    """A pruned run's measured (seconds, samples) per iteration from ``run_archive``
    (None: not archived, or archived without them)."""
    row = next(iter(jobruns.archived(db, [run_id])), None)
    if row is None or row["measured_seconds"] is None:
        return None
    return unpack_measured(row["measured_seconds"], row["measured_samples"])
