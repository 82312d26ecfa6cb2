"""The results screen of a serve campaign (issue 41 audit): its title names the median
end-to-end request latency, not seconds per mini-batch, and it offers no TFLOP/s or MFU
switch (a served model has no FLOPs count)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import OptionList

from dltop.jobs import campaign
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.tui.results_screen import ResultsScreen
from dltop.tui.results_widgets import MetricPicker

from .test_results_screen import results_app, settle

SERVE = """
name = "serve-screen"
[[matrix]]
frameworks = ["openai"]
mode = "serve"
endpoint = "http://127.0.0.1:9/v1"
models = ["m"]
request_rate = [5, 10]
"""


def seed_serve(tmp_path: Path, name: str = "s.db") -> Path:
    """A finished serve campaign, in ``name`` (a database that may hold others)."""
    db_path = tmp_path / name
    store = Store(connect(db_path))
    plan = campaign.preflight([parse(SERVE, "s.toml", "serve-screen")], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "s.toml"])
    for k, q in enumerate(queued):
        rid = store.start_run(q.job_id, cid, 1, "", 1)
        median = 0.05 + 0.01 * k
        store.finish_run(rid, q.job_id, "ok", {"median_s": median, "samples_per_s": 8 / median,
                                               "cv": 0.01, "n_iterations": 20})
    with store.db.conn:
        store.db.execute("update campaigns set status = 'finished'")
    return db_path


async def test_serve_results_screen_names_the_request_latency(tmp_path: Path) -> None:
    app = results_app(seed_serve(tmp_path))
    async with app.run_test(size=(140, 40)) as pilot:
        await app.refresh_now()
        await settle(app, pilot)
        await pilot.press("2")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, ResultsScreen) and screen.data is not None
        title = str(screen.query_one("#results-title").render())
        assert "median end-to-end request latency in s" in title, title
        assert "mini-batch" not in title
        assert "time" in screen.offered
        assert "tflops" not in screen.offered and "mfu" not in screen.offered
        await pilot.press("M")
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, MetricPicker)
        prompts = [str(o.prompt) for o in picker.query_one(OptionList)._options]
        (time,) = [p for p in prompts if p.split()[0] == "time"]
        assert "median end-to-end request latency" in time, time
        assert not any(p.split()[0] in ("tflops", "mfu") for p in prompts)
