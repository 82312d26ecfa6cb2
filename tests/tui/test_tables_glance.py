"""The TUI at a glance (issue 40 item 5) on the real H200 generation campaign
(docs/gpu-runs/2026-11-26-h200-llm, copied: never the original) at 160 columns: whole
model names in the queue, a metric bar that wraps instead of cutting, only the metrics
the campaign has, and each telemetry reason once in the run detail."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlite_utils
from textual.widgets import DataTable, OptionList

from dltop.live.rundetail import read_run_detail
from dltop.store.views import ensure_views
from dltop.tui.queue import QueueHeader, QueueTable
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.results_view import METRIC_NAMES
from dltop.tui.results_widgets import MetricBar, MetricPicker, bar_layout
from dltop.tui.rundetail import section
from dltop.tui.rundetail_rows import telemetry_rows

from .conftest import make_app

LLM = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-llm/campaign.db"
CHECK = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-check/gpu-check.db"


def test_the_bar_wraps_between_names_never_inside_one() -> None:
    text, spans = bar_layout(METRIC_NAMES, "ttft", 40)
    lines = text.plain.split("\n")
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines)
    assert [name for *_, name in spans] == list(METRIC_NAMES)  # every name, whole
    for line, start, end, name in spans:
        assert lines[line][start:end] == name
    one, _ = bar_layout(METRIC_NAMES, "time", 10**6)
    assert "\n" not in one.plain


async def _settle(app: Any, pilot: Any) -> None:
    for _ in range(3):
        await app.workers.wait_for_complete()
        await pilot.pause()


@pytest.mark.slow  # the app and the results worker on a real campaign: a few seconds
async def test_h200_llm_at_160_columns(tmp_path: Path) -> None:
    db = Path(shutil.copy(LLM, tmp_path / "campaign.db"))
    app = make_app(SimpleNamespace(db_path=db), gpus=1)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 50)) as pilot:
        await app.refresh_now()
        await _settle(app, pilot)
        queue = app.screen.query_one(QueueTable)
        rows = [queue.render_line(y).text for y in range(8)]
        assert any(" gpt2-small " in row for row in rows), rows  # not gpt2-smal
        assert "llama-1b" in " ".join(rows)
        header = str(app.screen.query_one(QueueHeader).render())
        assert header.index("batch") == rows[0].index(" 16 ") + 1  # columns stay aligned
        await pilot.press("2")
        await _settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, ResultsScreen) and screen.data is not None
        offered = screen.data.metrics
        # generation runs: latency, TTFT, TPOT, ITL and decode rate; no evaluations
        assert {"latency", "ttft", "tpot", "itl", "decode-rate"} <= set(offered)
        assert not {"accuracy", "time-to-accuracy", "perplexity"} & set(offered)
        screen.set_metric("tpot")  # latencies in ms, as the exports show them
        await _settle(app, pilot)
        table = screen.query_one("#results-table", DataTable)
        assert [c.label.plain for c in table.ordered_columns][-1] == "gpu:1 (ms)"
        cells = [table.get_row_at(i)[-1].plain for i in range(table.row_count)]
        assert any(c.startswith("0.6177 / 0.6199 / n/a: n=10") for c in cells), cells
        assert "in ms" in str(screen.query_one("#results-title").render())
        screen.set_metric("time")
        await _settle(app, pilot)
        bar = screen.query_one(MetricBar)
        drawn = str(bar.render())
        assert all(name in drawn.split() for name in offered) and "accuracy" not in drawn
        await pilot.press("M")
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, MetricPicker)
        names = [o.prompt.split()[0] for o in picker.query_one(OptionList)._options]
        assert names == list(offered)
        await pilot.press("escape")
        await pilot.pause()
        for _ in range(len(offered)):  # m goes round the offered ones only
            await pilot.press("m")
            await _settle(app, pilot)
            assert screen.metric in offered
        assert screen.metric == "time"


def test_each_telemetry_reason_is_said_once() -> None:
    """The H200 check's short windows: GPU and host figures share one reason."""
    db = sqlite_utils.Database(sqlite3.connect(f"file:{CHECK}?mode=ro", uri=True))
    ensure_views(db.conn)  # temporary views, as readers make them
    detail = read_run_detail(db, 11)
    assert detail is not None
    text = section("Telemetry", telemetry_rows(detail), detail).plain
    reason = "N/A: window 0.031 s, readings not counted (set min_time_s)"
    assert text.count(reason) == 1, text
    assert text.count("N/A") > 2  # the rows still say N/A, each


@pytest.mark.slow  # the app and the results worker on a real campaign: a few seconds
async def test_results_screen_states_each_reason_once(tmp_path: Path) -> None:
    """The H200 check's power: 14 windows too short, each said once under the table."""
    db = Path(shutil.copy(CHECK, tmp_path / "gpu-check.db"))
    app = make_app(SimpleNamespace(db_path=db), gpus=1)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 50)) as pilot:
        await app.refresh_now()
        await _settle(app, pilot)
        await pilot.press("2")
        await _settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, ResultsScreen)
        screen.set_metric("power")
        await _settle(app, pilot)
        table = screen.query_one("#results-table", DataTable)
        cells = [table.get_row_at(i)[-1].plain for i in range(table.row_count)]
        assert "n/a¹" in cells and not any("window" in c for c in cells)
        legend = str(screen.query_one("#results-legend").render())
        assert "reasons, listed below" in legend
        notes = str(screen.query_one("#results-notes").render())
        reason = "window 0.031 s, readings not counted (set min_time_s)"
        assert notes.count(reason) == 1 and "n/a¹ window 0.031 s" in notes
