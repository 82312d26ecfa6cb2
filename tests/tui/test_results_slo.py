"""The results screen follows the exports' rules (a setting the same in every row in the
caption, a column n/a in every row left out and named: results/display.py's
``without_unavailable``) and shows the serving answer (``dltop export --table slo``) of a
serve campaign, or the one line the CLI gives where the campaign has none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from tests.serving.conftest import SLO_FAKE, slo_campaign, start_fake
from textual.pilot import Pilot
from textual.widgets import DataTable, OptionList, Static

from dltop import cli
from dltop.results.table import Cell, Column, Role, Row, Table, key_cell
from dltop.tui import ops
from dltop.tui.app import DltopApp
from dltop.tui.results_scaling import scaling_text
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.results_view import SLO_TABLE, settled
from dltop.tui.results_widgets import MetricPicker

from .test_results_screen import results_app, seed_results, settle
from .test_serve_results import seed_serve


@pytest.fixture(scope="module")
def sweep_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real serve campaign: a rate sweep with a TTFT SLO against the streaming fake run
    one request at a time (the burst's later requests queue past 150 ms)."""
    tmp = tmp_path_factory.mktemp("slo-tui")
    proc, url = start_fake(*SLO_FAKE)
    try:
        db = tmp / "sweep.db"
        slo_campaign(db, tmp, "sweep", url, ("[10, 20, 500]", "slo_ttft_ms = 150"),
                     timeout_s=180)
        yield db
    finally:
        proc.kill()
        proc.wait()


async def open_results(app: DltopApp, pilot: Pilot[Any]) -> ResultsScreen:
    await app.refresh_now()
    await settle(app, pilot)
    await pilot.press("2")
    await settle(app, pilot)
    screen = app.screen
    assert isinstance(screen, ResultsScreen) and screen.data is not None
    return screen


async def pick(app: DltopApp, pilot: Pilot[Any], name: str) -> None:
    """Choose ``name`` in the metric picker (``M``), as a user does."""
    await pilot.press("M")
    await pilot.pause()
    picker = app.screen
    assert isinstance(picker, MetricPicker)
    options = picker.query_one(OptionList)
    options.highlighted = picker.names.index(name)
    await pilot.press("enter")
    await settle(app, pilot)


def headers(screen: ResultsScreen) -> list[str]:
    return [c.label.plain for c in screen.query_one("#results-table", DataTable)
            .ordered_columns]


def rendered(screen: ResultsScreen, widget: str) -> str:
    text = screen.query_one(widget, Static).render()
    return text.plain if isinstance(text, Text) else str(text)


def cli_error(capsys: pytest.CaptureFixture[str], db: Path) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli.main(["export", "--db", str(db), "--table", "slo", "--format", "md"])
    return rc, capsys.readouterr().err


async def test_a_constant_setting_is_in_the_caption_not_a_column(tmp_path: Path) -> None:
    app = results_app(seed_results(tmp_path))
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await open_results(app, pilot)
        assert "precision" not in headers(screen)
        notes = rendered(screen, "#results-notes")
        assert "constant: precision fp32" in notes, notes
        assert SLO_TABLE not in screen.offered  # a training campaign: no serving answer


async def test_a_campaign_without_an_slo_shows_the_clis_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = seed_serve(tmp_path)
    rc, err = cli_error(capsys, db)
    assert rc == 2 and "give no SLO" in err, err
    app = results_app(db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_results(app, pilot)
        assert screen.offered[-1] == SLO_TABLE
        await pick(app, pilot, SLO_TABLE)
        assert screen.data is not None and screen.data.metric == SLO_TABLE
        assert screen.data.refused and screen.data.refused in err
        assert rendered(screen, "#results-title") == "no serving answer (slo table)"
        assert rendered(screen, "#results-legend") == screen.data.refused
        assert screen.query_one("#results-table", DataTable).row_count == 0
        assert app.metric == SLO_TABLE
        await pilot.press("m")  # on from the slo table: the first metric again
        await settle(app, pilot)
        assert screen.metric == "time" and screen.query_one(DataTable).row_count == 2


async def test_another_campaign_gets_a_metric_it_has(tmp_path: Path) -> None:
    """The slo table picked for a serve campaign is not kept for a training one (which
    has no serving answer): the screen falls back to its first choice, ``time``."""
    db = seed_results(tmp_path)
    training = 1
    seed_serve(tmp_path, db.name)  # campaign 2, followed: the newest
    app = results_app(db)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await open_results(app, pilot)
        await pick(app, pilot, SLO_TABLE)
        assert screen.data is not None and screen.data.metric == SLO_TABLE
        app.open_campaign(training)
        await settle(app, pilot)
        assert screen.data is not None and SLO_TABLE not in screen.data.metrics
        assert screen.metric == screen.data.metric == app.metric == "time"
        assert not screen.data.refused
        assert rendered(screen, "#results-title") != "no serving answer (slo table)"
        assert screen.query_one("#results-table", DataTable).row_count > 0


@pytest.mark.slow
async def test_the_slo_table_of_a_rate_sweep(sweep_db: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli.main(["export", "--db", str(sweep_db), "--table", "slo",
                     "--format", "md"]) == 0
    exported = capsys.readouterr().out
    app = results_app(sweep_db)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_results(app, pilot)
        await pick(app, pilot, SLO_TABLE)
        data = screen.data
        assert data is not None and data.metric == SLO_TABLE and not data.refused
        title = rendered(screen, "#results-title")
        assert "serving capacity at SLO attainment ≥ 0.9" in title, title
        shown = headers(screen)
        assert shown[:3] == ["model", "framework", "device"]
        assert "capacity (req/s)" in shown and "attainment per rate" in shown
        # no energy without telemetry, too few requests for a p99: n/a in every row,
        # left out and named once with the reason, as the Markdown export does
        left_out = ("not shown, n/a in every row: TTFT p99 (ms), TPOT p99 (ms) (n=8); "
                    "J/token, net J/token (no GPU)")
        for header in ("J/token", "net J/token", "TTFT p99 (ms)", "TPOT p99 (ms)"):
            assert header not in shown
        notes = rendered(screen, "#results-notes")
        assert left_out in notes, notes
        assert left_out in exported and "| J/token" not in exported
        (constant,) = [line for line in notes.splitlines() if line.startswith("constant: ")]
        assert "slo ttft ms 150" in constant and "mode serve" in constant
        legend = rendered(screen, "#results-legend")
        assert legend.startswith("Sorted by J per output token"), legend
        # the answer first, the per-rate texts last (read without scrolling at 80 columns)
        assert shown[3] == "capacity (req/s)" and shown[-3:] == [
            "rates (req/s)", "attainment per rate", "note"], shown
        assert notes.count("Sorted by J per output token") == 0  # the legend says it
        table = screen.query_one("#results-table", DataTable)
        assert table.row_count == 1
        row = [c.plain for c in table.get_row_at(0)]
        capacity = row[shown.index("capacity (req/s)")]
        assert capacity in ("10", "20"), row  # the burst (500/s) misses the TTFT SLO
        assert row[shown.index("rates (req/s)")] == "10, 20, 500"
        assert not screen.query_one("#scaling-table").display
        # e writes what is shown: the slo table, as `dltop export --table slo` does
        out = sweep_db.parent / "shown.md"
        assert ops.export(sweep_db, 1, str(out), app.metric) == f"wrote {out}"
        assert out.read_text() == exported


@pytest.mark.slow
async def test_the_slo_answer_fits_80_columns(sweep_db: Path) -> None:
    app = results_app(sweep_db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_results(app, pilot)
        await pick(app, pilot, SLO_TABLE)
        table = screen.query_one("#results-table", DataTable)
        columns = table.ordered_columns
        upto = [c.label.plain for c in columns].index("capacity (req/s)")
        # the keys and the capacity drawn within the screen; the per-rate texts scroll
        assert sum(c.get_render_width(table) for c in columns[:upto + 1]) <= 80
        assert sum(c.get_render_width(table) for c in columns) > 80
        legend = screen.query_one("#results-legend")
        assert legend.size.height <= 3 and legend.region.bottom <= 24


def test_the_scaling_lines_leave_out_a_column_na_in_every_row() -> None:
    """The scaling table under the pivot by the same rule: a column n/a for one reason in
    every row is not drawn and is named once; its constant line is the pivot's (not
    repeated under it)."""
    table = Table(
        title="Scaling", columns=(Column("model", "model", Role.KEY),
                                  Column("devices", "devices", Role.KEY),
                                  Column("speedup", "speedup", Role.VALUE, "x"),
                                  Column("power", "power W", Role.VALUE, "W")),
        rows=tuple(Row((key_cell("fcn-r"), key_cell(d), Cell(f"{s:.2f}", s, "ok"),
                        Cell("n/a: no GPU", None, "ok")))
                   for d, s in (("cpu:1", 1.0), ("cpu:2", 1.8))),
        caption=("constant: precision fp32",))
    lines = scaling_text(settled(table)).plain.splitlines()
    assert lines[1].split() == ["model", "devices", "speedup"]
    assert lines[-1].startswith("not shown, n/a in every row: power W (no GPU)"), lines
    assert not any(line.startswith("constant:") for line in lines)
