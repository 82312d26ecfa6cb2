"""The TUI pivot's best cell per row: the largest for rates and utilisations, the smallest
for times. decode-rate (tokens/s) and the serve rates (req/s, output tokens/s, goodput)
used to be marked at their smallest, as if they were times; distinct-tokens (a fraction,
1 / new tokens for a decoder repeating one token) too."""

from __future__ import annotations

import pytest

from dltop.results.metricdefs import METRICS
from dltop.results.table import Cell, Column, Role, Row, Table
from dltop.tui.results_view import METRIC_NAMES, best_columns

TABLE = Table(title="t", columns=(Column("model", "model", Role.KEY),
                                  Column("a", "gpu:1"), Column("b", "gpu:2")), rows=())
ROW = Row((Cell("gpt-tiny"), Cell("100.0", 100.0), Cell("250.0", 250.0)))


@pytest.mark.parametrize("metric", ["decode-rate", "mbu", "prefill-tflops", "throughput",
                                    "mfu", "req-rate", "output-rate", "goodput",
                                    "distinct-tokens"])
def test_rates_and_utilisations_are_best_at_their_largest(metric: str) -> None:
    assert best_columns(ROW, TABLE, metric) == {2}


@pytest.mark.parametrize("metric", ["time", "ttft", "tpot", "itl", "energy", "perplexity",
                                    "error-rate", "dispatch-lag", "slot-wait", "client-cpu"])
def test_times_energy_and_perplexity_are_best_at_their_smallest(metric: str) -> None:
    assert best_columns(ROW, TABLE, metric) == {1}


@pytest.mark.parametrize("metric", METRIC_NAMES)
def test_every_switch_metric_is_best_where_its_declaration_says(metric: str) -> None:
    assert best_columns(ROW, TABLE, metric) == ({2} if METRICS[metric].higher else {1})
