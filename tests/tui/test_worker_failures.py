"""A widget's worker that fails is seen (issue 28): Textual does not bubble
``Worker.StateChanged`` to the app, so a chart or the log view used to stop silently.
Now the failure is notified, logged, and said in the widget's place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult

from dltop.tui import logview
from dltop.tui.charts import ChartSpec, RunChart
from dltop.tui.logview import LogViewer


class ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield RunChart(id="c")


def _broken_spec() -> ChartSpec:
    raise ValueError("no such series")


def _messages(app: App[None]) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_a_failed_chart_build_and_log_read_are_notified_and_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        wait_until_async: Callable[..., Any]) -> None:
    app = ChartApp()
    async with app.run_test(size=(80, 24)) as pilot:
        chart = app.query_one(RunChart)
        chart.draw(_broken_spec)
        await wait_until_async(lambda: _messages(app), 10, "the chart's failure notified")
        assert _messages(app) == ["chart build failed: ValueError: no such series"]
        await pilot.pause()
        assert "chart build failed: ValueError" in str(chart.render())
        assert app.is_running  # exit_on_error=False: the viewer lives on

        def broken_scan(*_: object, **__: object) -> None:
            raise RuntimeError("index overflow")

        monkeypatch.setattr(logview, "scan_log", broken_scan)
        log = tmp_path / "runner.log"
        log.write_text("one\n")
        await app.push_screen(LogViewer(str(log), "run 1"))
        await wait_until_async(lambda: len(_messages(app)) == 2, 10, "the log read's failure")
        assert _messages(app)[1] == "reading the log failed: RuntimeError: index overflow"
        viewer = app.screen
        assert isinstance(viewer, LogViewer)
        assert viewer.error == "  (reading the log failed: RuntimeError: index overflow)"
