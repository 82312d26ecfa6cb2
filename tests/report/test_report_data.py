"""What the report's figures plot (report/data.py, runs.py) and how they are drawn
(specs.py), from campaigns stored in a real database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dltop.report import data, figures, html, specs, vlsize
from dltop.report.content import Figure, Report
from dltop.results import queries
from dltop.store import connect
from dltop.store.reader import open_reader

from .reportdb import CPU_PROFILE, OOM_MESSAGE, add_campaign


def _report(path: Path, ref: str, max_runs: int = 24) -> Report:
    db = open_reader(path)
    return data.build(db, queries.resolve_campaigns(db, ref), max_runs=max_runs)


def _fig(figs: tuple[Figure, ...], key: str) -> Figure:
    return next(f for f in figs if f.key == key)


def test_cpu_campaign_figures_and_their_captions(report_db: Path) -> None:
    rep = _report(report_db, "1")
    keys = [f.key for f in rep.figures]
    assert keys == ["time-fcn-r-cpu", "scaling-fcn-r-cpu", "batch-fcn-r", "power-energy"]
    time = _fig(rep.figures, "time-fcn-r-cpu")
    # the OOM configuration has no point; every other one has n = 2 and its spread
    assert len(time.rows) == 7
    torch8 = [r for r in time.rows if r["series"] == "torch b8"]
    assert [r["devices"] for r in torch8] == [1, 2]
    assert torch8[0]["low"] < torch8[0]["seconds"] < torch8[0]["high"]
    assert "n = 2 ok runs per point" in time.caption
    assert "largest spread" in time.caption
    assert "noisy: tensorflow fcn-r b8 cpu:2 (run " in time.caption  # the run label
    assert "packed: none" in time.caption and "contaminated: none" in time.caption
    scaling = _fig(rep.figures, "scaling-fcn-r-cpu")
    two = [r for r in scaling.rows if r["devices"] == 2 and r["series"] == "torch b8"]
    assert two and 1.0 < two[0]["speedup"] < 2.0
    assert two[0]["efficiency"] == pytest.approx(two[0]["speedup"] / 2)
    batch = _fig(rep.figures, "batch-fcn-r")
    assert batch.panels == ("samples/s",)
    assert "GPU memory omitted: no GPU run" in batch.caption
    energy = _fig(rep.figures, "power-energy")
    assert energy.omitted.startswith("no GPU run") and energy.rows == ()
    for fig in rep.figures:  # every drawn figure states n, the spread, the flagged runs
        if not fig.omitted:
            assert "n = " in fig.caption and "largest spread" in fig.caption, fig.key
            assert all(f"{flag}: " in fig.caption for flag in
                       ("noisy", "packed", "contaminated")), fig.key
    assert all("flags: " in run.caption and "median " in run.caption for run in rep.runs)


def test_failures_carry_their_reason_in_the_summary(report_db: Path) -> None:
    rep = _report(report_db, "1")
    status_at = [c.key for c in rep.summary.columns].index("status")
    failed = [i for i, row in enumerate(rep.summary.rows)
              if row.cells[status_at] is not None and row.cells[status_at].text != "ok"]
    assert len(failed) == 1
    assert rep.reasons == {failed[0]: OOM_MESSAGE}


def test_gpu_campaign_power_energy_and_memory_are_labelled_simulated(report_db: Path) -> None:
    rep = _report(report_db, "2")
    energy = _fig(rep.figures, "power-energy")
    assert not energy.omitted and energy.panels == ("power W", "J/sample")
    assert "SIMULATED" in energy.title and "SIMULATED" in energy.caption
    power = {(r["framework"], r["config"]): r["value"] for r in energy.rows
             if r["panel"] == "power W"}
    assert power[("torch", "fcn-r b8 gpu:2")] == pytest.approx(300.0)
    # one batch size: the batch figure is omitted with its reason, not drawn empty
    assert _fig(rep.figures, "batch-fcn-r").omitted == "one batch size only (8)"
    run = rep.runs[0]
    assert "simulated" in run.title
    assert {"GPU util %", "GPU power W", "GPU memory MiB"} <= set(run.panels)
    assert any("(simulated)" in str(r["series"]) for r in run.rows)


def test_run_traces_share_one_axis_and_shade_warmup(report_db: Path) -> None:
    rep = _report(report_db, "1")
    assert len(rep.runs) == 14 and rep.runs_note == "All 14 runs with iterations."
    run = rep.runs[0]
    assert run.panels == ("s/iter", "loss", "CPU %")
    assert "GPU panels omitted: no GPU telemetry" in run.caption
    # start-up (1 s before the first step) is not shaded as warm-up
    start, end = run.extra["warmup_start_s"], run.extra["warmup_end_s"]
    assert start == pytest.approx(1.0) and end > start
    warm = [r["t"] for r in run.rows if r.get("series") == "warm-up"]
    assert warm and max(warm) == pytest.approx(end)


def test_campaigns_on_two_hosts_are_separate_lines(report_db: Path) -> None:
    db = connect(report_db)
    add_campaign(db, CPU_PROFILE, "elsewhere", gpu=False, host="other")
    db.close()
    rep = _report(report_db, "1,3", max_runs=0)
    time = _fig(rep.figures, "time-fcn-r-cpu")
    torch8 = sorted((r["series"], r["devices"]) for r in time.rows
                    if str(r["series"]).startswith("torch b8"))
    assert torch8 == [("torch b8 @h", 1), ("torch b8 @h", 2), ("torch b8 @other", 1),
                      ("torch b8 @other", 2)]
    scaling = _fig(rep.figures, "scaling-fcn-r-cpu")
    assert {r["series"] for r in scaling.rows if r["devices"] == 2
            and r["framework"] == "torch"} == {"torch b8 @h", "torch b16 @h",
                                                "torch b8 @other", "torch b16 @other"}
    assert rep.runs == () and rep.runs_note.startswith("Showing 0 of 30 runs")


def test_capped_runs_show_every_configuration_first(report_db: Path) -> None:
    rep = _report(report_db, "1", max_runs=4)
    assert rep.runs_note.startswith("Showing 4 of 14 runs")
    assert all(f.title.endswith("#1") for f in rep.runs)


def test_a_campaign_without_a_finished_run_says_so(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    db = connect(path)
    cid = add_campaign(db, CPU_PROFILE, "queued", gpu=False, finish=False)
    db.execute("delete from iterations")
    db.execute("delete from runs")
    db.execute("update jobs set status = 'queued'")
    db.conn.commit()
    rep = _report(path, str(cid))
    assert rep.empty.startswith(f"No finished run in campaign {cid} `queued`")
    assert rep.figures == () and rep.runs == ()
    page = "\n".join(html.page_parts(rep, draw=lambda spec: "<svg></svg>"))
    assert "No finished run in campaign" in page and "<svg" not in page


def test_a_campaign_whose_runs_all_failed_says_why(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    db = connect(path)
    add_campaign(db, CPU_PROFILE, "broken", gpu=False)
    db.execute("update runs set status = 'crashed', error_message = 'segfault'")
    db.conn.commit()
    rep = _report(path, "1")
    assert rep.empty == ("No run of campaign 1 `broken` (finished) ended ok: nothing to plot "
                         "(the summary says why).")
    assert set(rep.reasons.values()) == {"segfault"} and len(rep.reasons) == 8


def test_specs_are_valid_vega_lite_and_render_offline(report_db: Path) -> None:
    rep = _report(report_db, "2", max_runs=1)
    drawn = figures.drawn(rep)
    assert {f.kind for f in drawn} == {"devices", "scaling", "energy", "run"}
    for fig in drawn:
        spec = specs.spec(fig, specs.SCREEN)
        json.dumps(spec)  # plain JSON: inline data only
        assert "url" not in json.dumps(spec.get("data", {}))
        svg = specs.render(spec, "svg").decode()
        assert svg.startswith("<svg") and fig.title.split(" (")[0] in svg
    scaling = specs.spec(_fig(rep.figures, "scaling-fcn-r-gpu"), specs.SCREEN)
    ideal = scaling["hconcat"][0]["layer"][0]
    assert ideal["mark"]["strokeDash"] == specs.DASH
    assert ideal["data"]["values"] == [{"devices": 1, "ideal": 1}, {"devices": 2, "ideal": 2}]
    with pytest.raises(ValueError, match="omitted"):
        specs.spec(_fig(rep.figures, "batch-fcn-r"), specs.SCREEN)


def test_paper_sizes_fit_the_columns(report_db: Path) -> None:
    rep = _report(report_db, "2", max_runs=1)
    time = _fig(rep.figures, "time-fcn-r-gpu")
    size, width = vlsize.paper_size(time)
    assert width == "single"
    svg = specs.render(specs.spec(time, size), "svg").decode()
    points = float(svg.split('width="', 1)[1].split('"', 1)[0])
    assert 150 <= points <= 3.3 * vlsize.POINTS_PER_INCH
    run = rep.runs[0]
    size, width = vlsize.paper_size(run)
    svg = specs.render(specs.spec(run, size), "svg").decode()
    assert width == "double"
    assert float(svg.split('width="', 1)[1].split('"', 1)[0]) <= 7 * vlsize.POINTS_PER_INCH


def test_inlined_svgs_keep_their_ids_apart() -> None:
    svg = '<svg><clipPath id="clip1"/><g clip-path="url(#clip1)"/><use href="#clip1"/></svg>'
    out = html.inline_svg(svg, "fig-a")
    assert 'id="fig-a-clip1"' in out and "url(#fig-a-clip1)" in out
    assert 'href="#fig-a-clip1"' in out and 'id="clip1"' not in out
