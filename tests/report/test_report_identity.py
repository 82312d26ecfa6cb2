"""Figures of the real H200 campaign (docs/gpu-runs/2026-11-26-h200-check): runs over time
start at the first iteration with s/iter fitted to the measured steps (issue 31 item 2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from dltop.report import data, specs
from dltop.report.barspecs import BAR_ROWS
from dltop.report.content import Report
from dltop.results import queries
from dltop.store.views import ensure_views

H200 = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-check"


def report_of(name: str, max_runs: int = 2) -> Report:
    db = sqlite_utils.Database(sqlite3.connect(f"file:{H200 / name}?mode=ro", uri=True))
    ensure_views(db.conn)  # written before the readers' views: temporary ones, as readers do
    return data.build(db, queries.resolve_campaigns(db, "1"), max_runs=max_runs)


@pytest.fixture(scope="module")
def check() -> Report:
    return report_of("gpu-check.db")


def test_a_run_figure_starts_at_its_iterations_and_clips_the_autotuning_step(
        check: Report) -> None:
    run = next(f for f in check.runs if f.extra.get("run_id") == 1)
    spec = specs.spec(run, specs.SCREEN)
    top = spec["vconcat"][0]["layer"]
    band = top[0]["data"]["values"][0]  # start-up band: just before the first step
    assert 5.5 < band["a"] < band["b"] < 6.5
    data_layer = next(layer for layer in top if layer["data"]["values"]
                      and "value" in layer["data"]["values"][0]
                      and layer["data"]["values"][0].get("panel") == "s/iter")
    x, y = data_layer["encoding"]["x"], data_layer["encoding"]["y"]
    assert x["scale"]["domain"][0] == pytest.approx(band["a"])
    low, high = y["scale"]["domain"]
    assert y["scale"]["clamp"] and 0.045 < low < 0.056 < high < 0.07  # not 2.66 s
    marks = [layer for layer in top if layer["mark"].get("type") == "text"]
    assert marks and marks[0]["data"]["values"][0]["text"] == "2.66 s"
    # every panel of the stack shares the window
    for panel in spec["vconcat"]:
        for layer in panel["layer"]:
            assert layer["encoding"]["x"]["scale"]["domain"] == x["scale"]["domain"]
    assert "start-up before the first iteration" in spec["vconcat"][-1]["layer"][-1][
        "encoding"]["x"]["title"]


def test_run_titles_and_flag_lists_carry_the_run_label(check: Report) -> None:
    titles = {f.extra["run_id"]: f.title for f in check.runs}
    assert titles[1] == "run 1: torch resnet-50 b256 gpu:1 bf16 channels last 40 it 10 warm-up #1"
    assert titles[2] == "run 2: torch resnet-50 b256 gpu:1 fp16 channels last 40 it 10 warm-up #1"
    energy = next(f for f in check.figures if f.key == "power-energy")
    # run 11 was noisy: its model and precision are named, not "torch b1024 gpu:1"
    assert "noisy: torch fcn-r b1024 gpu:1 bf16 20 it 5 warm-up (run 11)" in energy.caption


def test_precision_figure_per_model_with_horizontal_bars(check: Report) -> None:
    fig = next(f for f in check.figures if f.key == "precision")
    assert fig.panels == ("samples/s", "J/sample")
    r50 = {(r["category"], r["framework"]) for r in fig.rows
           if r["model"] == "resnet-50" and r["panel"] == "samples/s"}
    assert ("bf16 b256", "jax") in r50 and ("fp32 b64", "torch") in r50
    assert ("fp16 b256 channels last", "torch") in r50
    spec = specs.spec(fig, specs.SCREEN)
    assert [row["title"]["text"] for row in spec["vconcat"]] == \
        ["fcn-r", "alexnet-r", "resnet-50", "resnet-56"]  # one row of axes per model
    fcn = spec["vconcat"][0]["hconcat"][0]["layer"][0]
    assert fcn["encoding"]["y"]["field"] == "category"  # horizontal bars
    assert "color" not in fcn["encoding"]  # one framework: no legend
    assert fcn["encoding"]["x"]["title"] == "samples/s (torch)"
    alex = spec["vconcat"][1]["hconcat"][0]["layer"][0]
    assert alex["encoding"]["color"]["scale"]["domain"] == ["torch", "jax"]
    # the energy figure: horizontal, named by the run label's words, not "20 5 false"
    energy = next(f for f in check.figures if f.key == "power-energy")
    # (the run length, 40 it 10 warm-up, left out: it does not make a configuration)
    assert {r["config"] for r in energy.rows} >= {
        "resnet-50 b256 gpu:1 bf16 channels last", "resnet-50 b64 gpu:1 fp32"}
    bars = specs.spec(energy, specs.SCREEN)["hconcat"][0]
    assert bars["layer"][0]["encoding"]["y"]["field"] == "config"
    assert bars["height"] >= BAR_ROWS * 4 * 2  # 4 configurations, 2 frameworks


def test_single_point_series_get_shapes_not_dashes(check: Report) -> None:
    fig = next(f for f in check.figures if f.key == "batch-resnet-50")
    spec = specs.spec(fig, specs.SCREEN)
    layers = spec["hconcat"][0]["layer"]
    # each configuration is one point: no line (a dash legend would mean nothing)
    assert [layer["mark"]["type"] for layer in layers] == ["point", "rule"]
    assert layers[0]["encoding"]["shape"]["field"] == "variant"
    variants = {r["variant"] for r in fig.rows}
    # the words telling it from the others (not the run length, not the one device)
    assert {"bf16 channels last", "fp32 channels last off"} <= variants


def test_a_panel_of_one_series_has_no_legend(check: Report) -> None:
    run = next(f for f in check.runs if f.extra.get("run_id") == 1)
    spec = specs.spec(run, specs.SCREEN)
    legends = {panel: layer["encoding"]["color"].get("legend", "drawn")
               for panel, p in zip(run.panels, spec["vconcat"], strict=True)
               for layer in p["layer"] if "color" in layer["encoding"]}
    assert legends["loss"] is None and legends["GPU power W"] is None
    assert legends["s/iter"] == "drawn" and legends["CPU %"] == "drawn"


def test_training_and_inference_get_their_own_axes() -> None:
    options = report_of("options.db")
    fig = next(f for f in options.figures if f.key == "batch-resnet-50")
    spec = specs.spec(fig, specs.SCREEN)
    panels = [p for row in spec["vconcat"] for p in row["hconcat"]]  # a row per mode
    titles = [p["layer"][0]["encoding"]["y"]["title"] for p in panels]
    assert "samples/s (train)" in titles and "samples/s (inference)" in titles
    for p in panels:  # no panel mixes the modes
        assert len({r["mode"] for r in p["data"]["values"]}) == 1
    assert all(len(row["hconcat"]) <= 2 for row in spec["vconcat"])
    # torch only: no framework legend (the colour tells nothing apart)
    coloured = [layer for layer in panels[0]["layer"] if "color" in layer["encoding"]]
    assert coloured[-1]["encoding"]["color"]["legend"] is None


def test_figures_md_names_runs_with_the_run_label(check: Report) -> None:
    from dltop.report import figures

    md = figures.render_figures(check, "svg", draw=lambda spec, fmt: b"<svg/>")
    text = md["figures.md"].decode()
    assert "run 1: torch resnet-50 b256 gpu:1 bf16 channels last" in text
    assert "run 2: torch resnet-50 b256 gpu:1 fp16 channels last" in text
    assert "Throughput and energy per sample by precision" in text


def test_figures_md_shows_html_in_names_as_text(check: Report) -> None:
    """Issue 38: figures.md is Markdown; a campaign named with a tag must not render it."""
    import dataclasses

    from dltop.report import figures

    named = dataclasses.replace(check, title="c <img src=x onerror=alert(1)>\x1b[2J")
    text = figures.render_figures(named, "svg", draw=lambda spec, fmt: b"<svg/>")[
        "figures.md"].decode()
    assert "<img" not in text and "\x1b" not in text
    assert text.startswith("# c &lt;img src=x onerror=alert(1)>\\x1b[2J: figures")
