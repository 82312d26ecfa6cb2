"""``dltop check``: every configuration of campaigns against its performance references
(:mod:`dltop.results.references` judges; the intervals are the summary's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dltop import catalog
from dltop.results import summary
from dltop.results.aggregate import config_results
from dltop.results.places import device_key, rank
from dltop.results.references import Verdict, stored_references, verdicts

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils


def check(db: sqlite_utils.Database, campaign_ids: Sequence[int]) -> list[Verdict]:
    """Every configuration of the campaigns against its references, in table order: one
    verdict per referenced metric, one ``no reference`` verdict for each other."""
    results = config_results(db, list(campaign_ids))
    results.sort(key=lambda r: (rank(r.model, catalog.MODELS), r.model,
                                rank(r.framework, catalog.FRAMEWORKS), r.batch_size,
                                device_key(r.device), r.config_key))
    return verdicts(results, stored_references(db, campaign_ids), summary.intervals(results))
