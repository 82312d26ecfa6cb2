"""The run detail's charts start where the iterations start, start-up a shaded band left
of them (issue 31 item 2, as the report's run figures do), on the real H200 run 1: 6.2 s
of start-up, then a 2.66 s cuDNN autotuning step and 55 ms steps."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dltop.tui.charts import STARTUP_MARKER, RunChart
from dltop.tui.rundetail import RunDetailScreen

from .conftest import make_app

H200 = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-check/gpu-check.db"


def plot_rows(chart: RunChart) -> list[str]:
    """The plot area's rows of a built chart: between the frame's top and bottom."""
    text = chart.render()
    lines = str(getattr(text, "plain", text)).splitlines()
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    return [line[line.index("┤") + 1 if "┤" in line else line.index("│") + 1:]
            for line in lines[top + 1:bottom]]


@pytest.mark.slow  # the charts are built in thread workers: a few seconds on 2 cores
async def test_startup_is_a_band_left_of_the_first_iteration(
        tmp_path: Path, wait_until_async: Callable[..., Any]) -> None:
    db = Path(shutil.copy(H200, tmp_path / "gpu-check.db"))  # never the original
    app = make_app(SimpleNamespace(db_path=db), gpus=1)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 90)) as pilot:  # rows for each chart
        screen = RunDetailScreen(db, 1)
        app.push_screen(screen)
        await wait_until_async(lambda: screen.loads >= 1, 20, "run 1 to be read")
        charts = {c.id: c for c in screen.query(RunChart)}
        shown = [charts[k] for k in ("chart-iter", "chart-power")]
        await pilot.pause()
        await wait_until_async(lambda: all(c.built for c in shown), 30, "the charts")
        for chart in shown:
            rows = plot_rows(chart)
            banded = [r for r in rows if STARTUP_MARKER in r]
            assert len(rows) >= 6 and len(banded) >= len(rows) - 1, chart.id  # its height
            # a narrow band at the left edge (6 % of the iterations' span), not 6 s of axis
            widths = {len(r) - len(r.lstrip(STARTUP_MARKER)) for r in banded}
            assert min(widths) >= 1 and max(widths) <= len(rows[0]) // 8, (chart.id, widths)
        title = str(getattr(charts["chart-iter"].render(), "plain", ""))
        assert "start-up 6.2 s (shaded)" in title and "1 clipped (max 2.66 s)" in title
        # the s/iter line lies right of the band: the first step ends after it
        iter_rows = plot_rows(charts["chart-iter"])
        band_end = max(len(r) - len(r.lstrip(STARTUP_MARKER)) for r in iter_rows)
        assert any(r[band_end:].strip(" │") for r in iter_rows)
