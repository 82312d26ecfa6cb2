"""A metric is declared once (issue 39 item 2): the command line's choices, the pivot's
note, docs/metrics.md's table, the TUI's best cell and compare's verdicts all follow
its declaration (results/metricdefs.py), and each declared metric has one compute
function, which value_of calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.results.test_metrics import campaign

from dltop.cli.parser import build_parser
from dltop.results import comparemetrics, export
from dltop.results.compare import verdict
from dltop.results.metricdefs import (
    CONVERGENCE,
    EXTRA,
    METRICS,
    MODES,
    SUMMARY,
    Metric,
    computes,
    metric,
)
from dltop.results.metrics import value_of
from dltop.results.table import Role
from dltop.tui.results_view import METRIC_NAMES, best_columns

DOCS = Path(__file__).parents[2] / "docs" / "metrics.md"


def test_every_declared_metric_is_an_export_choice_and_nothing_else() -> None:
    parser = build_parser()
    for name in METRICS:
        assert parser.parse_args(["export", "--metric", name]).metric == name
    # the summary's companions are declared too, but the pivot does not offer them
    proc = subprocess.run([sys.executable, "-m", "dltop", "export", "--metric", "host-cpu"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'host-cpu'" in proc.stderr
    assert tuple(export.METRICS) == tuple(METRICS)
    # compare offers the metrics whose declaration has verdict words
    for name in METRICS:
        argv = ["compare", "1", "2", "--metric", name]
        if name in comparemetrics.METRICS:
            assert parser.parse_args(argv).metric == name
        else:
            with pytest.raises(SystemExit):
                parser.parse_args(argv)
    assert [n for n in comparemetrics.ALL if n not in METRICS] == ["mfu-no-embedding"]


def test_the_switch_offers_every_declared_metric() -> None:
    assert sorted(METRIC_NAMES) == sorted(METRICS)
    # the metrics of some modes only come after those of every run
    assert METRIC_NAMES[-len(CONVERGENCE):] == CONVERGENCE


def metrics_markdown() -> str:
    """The table of METRICS as docs/metrics.md shows it."""
    lines = ["| M | what | unit | best | modes | a cell over the ok runs |", "|---" * 6 + "|"]
    lines += [f"| `{m.name}` | {m.title} | {m.unit or '-'} | "
              f"{'highest' if m.higher else 'lowest'} | "
              f"{'every mode' if m.modes == MODES else ', '.join(m.modes)} | {m.how} |"
              for m in METRICS.values()]
    return "\n".join(lines) + "\n"


def test_docs_show_the_declared_table() -> None:
    table = metrics_markdown()
    assert table in DOCS.read_text(encoding="utf-8")
    rows = table.splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| `{n}`" for n in METRICS]
    assert all(("| highest |" in r) == METRICS[n].higher for r, n in zip(rows, METRICS,
                                                                        strict=True))


def test_the_pivot_note_says_how_each_cell_is_made(campaigns: Any) -> None:
    db, _ = campaign(campaigns)
    for name, m in METRICS.items():
        notes = " ".join(export.build_table(db, 1, name).notes)
        if name != "time":  # the default keeps its own note of medians
            assert f"Cells: {m.how} over the ok repeats" in notes, name


def test_the_summary_has_a_column_of_every_metric_of_every_run(campaigns: Any) -> None:
    db, _ = campaign(campaigns)
    headers = [c.header for c in export.results_table(db, 1, "summary").columns]
    assert set(SUMMARY) >= set(METRICS) - set(CONVERGENCE)
    # in declaration order; time's column is the median's (the CI columns follow it)
    found = [headers.index(metric(n).header) for n in SUMMARY if n != "time"]
    assert found == sorted(found) and len(found) == len(SUMMARY) - 1


@pytest.mark.parametrize("name", [*METRICS, *EXTRA])
def test_value_of_is_the_declared_compute_function(campaigns: Any, name: str) -> None:
    _, res = campaign(campaigns)
    assert not res["gpu:2"].runs  # never ran: its status, whatever the metric
    assert value_of(res["gpu:2"], name).reason == res["gpu:2"].label
    for device in ("cpu:1", "gpu:1"):
        assert value_of(res[device], name) == metric(name).compute(res[device])


def test_direction_decides_the_tui_best_cell_and_compare_verdicts(campaigns: Any) -> None:
    db, _ = campaign(campaigns)
    pivot = export.build_table(db, 1, "throughput")
    row = next(r for r in pivot.rows
               if sum(c is not None and c.value is not None for c in r.cells) >= 2)
    values = {i: float(c.value) for i, (col, c) in enumerate(zip(pivot.columns, row.cells,
                                                                 strict=True))
              if col.role is Role.VALUE and c is not None and c.value is not None}
    top, bottom = max(values, key=values.__getitem__), min(values, key=values.__getitem__)
    assert best_columns(row, pivot, "throughput") == {top}
    assert best_columns(row, pivot, "time") == {bottom}
    for name in comparemetrics.ALL:
        better, worse = metric(name).words
        up = verdict(1.5, 1.4, 1.6, name, 0.05)
        assert up == (better if metric(name).higher else worse), name
        assert verdict(0.5, 0.4, 0.6, name, 0.05) == (worse if metric(name).higher else better)


def test_a_metric_has_one_compute_function() -> None:
    with pytest.raises(RuntimeError, match="has a compute function already"):
        computes("time")(lambda res: value_of(res, "time"))
    with pytest.raises(ValueError, match="unknown metric 'no-such'"):
        computes("no-such")(lambda res: value_of(res, "time"))
    assert all(isinstance(m, Metric) and m.how for m in (*METRICS.values(), *EXTRA.values()))
