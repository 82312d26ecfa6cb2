"""The results screen offers the server's overhead (``dltop export --table overhead``)
where a serve run says which of dltop's models it serves, as it offers the slo table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.serving.conftest import OVERHEAD_GEN, OVERHEAD_SERVE, overhead_campaign, start_fake
from textual.widgets import DataTable

from dltop import cli
from dltop.tui import ops
from dltop.tui.results_view import OVERHEAD_TABLE, SLO_TABLE

from .test_results_screen import results_app
from .test_results_slo import headers, open_results, pick, rendered

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Campaign 1: gpt-tiny generate at batch 1 beside the fake served as shape gpt-tiny
    at concurrency 1; campaign 2: the same serve runs without a generate run."""
    tmp = tmp_path_factory.mktemp("overhead-tui")
    proc, url = start_fake("--ttft-ms", "20", "--itl-ms", "3")
    try:
        db = tmp / "pair.db"
        serve = OVERHEAD_SERVE.format(model="tiny", url=url, conc=1, extra='shape = "gpt-tiny"')
        overhead_campaign(db, tmp, "pair", OVERHEAD_GEN.format(batches="[1]", new=8), serve)
        overhead_campaign(db, tmp, "alone", serve)
        yield db
    finally:
        proc.kill()
        proc.wait()


async def test_the_overhead_table_is_offered_and_shown(
        pair_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli.main(["export", "--db", str(pair_db), "--campaign", "pair", "--table",
                     "overhead", "--format", "md"]) == 0
    exported = capsys.readouterr().out
    app = results_app(pair_db)
    async with app.run_test(size=(140, 40)) as pilot:
        app.open_campaign(1)
        screen = await open_results(app, pilot)
        assert screen.offered[-2:] == (SLO_TABLE, OVERHEAD_TABLE)
        await pick(app, pilot, OVERHEAD_TABLE)
        data = screen.data
        assert data is not None and data.metric == OVERHEAD_TABLE and not data.refused
        assert "the server's overhead against dltop's own generate runs" in rendered(
            screen, "#results-title")
        shown = headers(screen)
        assert shown[:5] == ["shape", "served model", "generate", "device", "pairing"]
        assert "TPOT serve/generate" in shown
        table = screen.query_one("#results-table", DataTable)
        row = [c.plain for c in table.get_row_at(0)]
        assert row[:5] == ["gpt-tiny", "tiny", "torch batch 1", "cpu:1",
                           "concurrency 1 = batch 1"]
        out = pair_db.parent / "shown.md"
        assert ops.export(pair_db, 1, str(out), app.metric) == f"wrote {out}"
        assert out.read_text() == exported


async def test_a_campaign_without_a_pair_shows_the_clis_reason(
        pair_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli.main(["export", "--db", str(pair_db), "--campaign", "alone", "--table",
                     "overhead"]) == 2
    err = capsys.readouterr().err
    app = results_app(pair_db)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_results(app, pilot)  # the newest: "alone"
        await pick(app, pilot, OVERHEAD_TABLE)
        assert screen.data is not None and screen.data.refused
        assert screen.data.refused in err and "no generate run of gpt-tiny" in err
        assert rendered(screen, "#results-title") == "no serving answer (overhead table)"
        assert screen.query_one("#results-table", DataTable).row_count == 0
