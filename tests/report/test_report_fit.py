"""The report of the committed GPU databases (docs/gpu-runs: the H100 and H200 checks,
CNN and transformer runs) reads at a glance (issue 40 item 6): no panel puts two modes
on one linear axis or spans more than 100x on one, legends are whole, a lone point is
labelled, transformers say tokens/s and J/token, and what is left out is one line per
reason. The specs are checked as data; tests/browser/test_report_page.py loads the page.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from dltop.report import data, figures, html, specs
from dltop.report.content import Figure, Report
from dltop.report.encode import LOG_SPAN, log_axis
from dltop.report.leftout import caption_text, omitted_lines
from dltop.results import queries
from dltop.store.views import ensure_views

RUNS = Path(__file__).parents[2] / "docs/gpu-runs"
DATABASES = {"h100": "2026-11-26-h100-check/campaign.db",
             "h200": "2026-11-26-h200-check/gpu-check.db",
             "options": "2026-11-26-h200-check/options.db",
             "llm": "2026-11-26-h200-llm/campaign.db"}


def _report(name: str) -> Report:
    db = sqlite_utils.Database(sqlite3.connect(f"file:{RUNS / DATABASES[name]}?mode=ro",
                                               uri=True))
    ensure_views(db.conn)  # temporary views, as the readers make them
    return data.build(db, queries.resolve_campaigns(db, "1"), max_runs=1)


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    return {name: _report(name) for name in DATABASES}


def _drawn(report: Report) -> list[Figure]:
    return [f for f in report.figures if not f.omitted]


def _views(spec: Any) -> Iterator[Mapping[str, Any]]:
    """Every view of a spec that carries its own rows (a panel of bars or lines)."""
    if isinstance(spec, Mapping):
        if "layer" in spec and "data" in spec:
            yield spec
        for value in spec.values():
            yield from _views(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from _views(value)


def _value_scale(view: Mapping[str, Any]) -> str:
    """The scale type of the view's axis that plots ``value`` (linear when unset)."""
    for layer in view["layer"]:
        for channel in ("x", "y"):
            enc = layer.get("encoding", {}).get(channel, {})
            if enc.get("field") == "value":
                return str(enc.get("scale", {}).get("type", "linear"))
    raise AssertionError(f"no value axis in {view}")


def test_no_linear_axis_mixes_modes_or_spans_more_than_100x(
        reports: dict[str, Report]) -> None:
    checked = 0
    for name, report in reports.items():
        for fig in _drawn(report):
            for view in _views(specs.spec(fig, specs.SCREEN)):
                rows = view["data"]["values"]
                if not rows or "value" not in rows[0]:
                    continue
                checked += 1
                scale = _value_scale(view)
                modes = {r["mode"] for r in rows if "mode" in r}
                values = [r["value"] for r in rows]
                assert len(modes) <= 1, (name, fig.key, modes)
                if log_axis(values):
                    assert scale == "log", (name, fig.key, min(values), max(values))
    assert checked >= 20
    # the case: training J/token (0.0018) and generation's (0.55) apart
    energy = next(f for f in reports["llm"].figures if f.key == "power-energy")
    joules = [(r["mode"], r["value"]) for r in energy.rows if r["panel"] == "J/token"]
    assert max(v for m, v in joules if m == "generate") / \
        min(v for m, v in joules if m == "train") > LOG_SPAN
    rows = specs.spec(energy, specs.SCREEN)["vconcat"]
    assert [row["title"]["text"] for row in rows] == ["training", "generation"]


def test_a_panel_spanning_more_than_100x_is_drawn_on_a_log_axis() -> None:
    assert log_axis([0.0018, 0.55]) and not log_axis([0.01, 0.5]) and not log_axis([0, 5])
    rows = tuple({"panel": p, "framework": "torch", "config": c, "mode": "train",
                  "facet": "training", "value": v, "low": v, "high": v}
                 for c, v in (("fcn-r b1024", 0.0004), ("resnet-50 b64", 0.6))
                 for p in ("J/sample",))
    fig = Figure("power-energy", "energy", "t", rows=rows, panels=("J/sample",))
    (view,) = _views(specs.spec(fig, specs.SCREEN))
    assert _value_scale(view) == "log"
    assert "log scale" in view["layer"][0]["encoding"]["x"]["title"]


def test_legends_and_labels_are_whole(reports: dict[str, Report]) -> None:
    def limits(spec: Any) -> Iterator[Any]:
        if isinstance(spec, Mapping):
            if "labelLimit" in spec:
                yield spec["labelLimit"]
            for value in spec.values():
                yield from limits(value)
        elif isinstance(spec, list):
            for value in spec:
                yield from limits(value)

    for report in reports.values():
        for fig in _drawn(report):
            for size in (specs.SCREEN, figures.paper_size(fig)[0]):
                spec = specs.spec(fig, size)
                assert spec["config"]["legend"]["labelLimit"] == 0, fig.key
                assert set(limits(spec)) == {0}, fig.key


def test_a_lone_point_is_labelled(reports: dict[str, Report]) -> None:
    # options.db: batch-1 inference with CUDA graphs is one point beside the b1-b32 line
    fig = next(f for f in reports["options"].figures if f.key == "batch-resnet-50")
    spec = specs.spec(fig, specs.SCREEN)
    texts = [layer for view in _views(spec) for layer in view["layer"]
             if layer["mark"]["type"] == "text"]
    labels = {(r["batch"], r["label"]) for layer in texts for r in layer["data"]["values"]
              if r["panel"] == "samples/s"}
    assert (1, "cuda graphs") in labels
    # a series that is a line gets no text: its legend entry names it
    assert all(r["label"] != "cuda graphs off" for layer in texts
               for r in layer["data"]["values"])


def test_transformer_figures_and_table_say_tokens(reports: dict[str, Report]) -> None:
    llm = reports["llm"]
    for fig in _drawn(llm):
        text = json.dumps(specs.spec(fig, specs.SCREEN)) + fig.caption
        assert "samples/s" not in text and "J/sample" not in text, fig.key
    by_key = {f.key: f for f in _drawn(llm)}
    assert by_key["batch-gpt2-small"].panels[0] == "tokens/s"
    assert "runs' tokens/s" in by_key["batch-gpt2-small"].caption
    assert by_key["power-energy"].title == "GPU power and energy per token per framework"
    assert "J/token" in by_key["power-energy"].panels
    headers = [c.header for c in llm.summary.columns]
    assert "tokens/s" in headers and "J/token" in headers and "samples/s" not in headers
    # a CNN campaign keeps samples
    cnn = {f.key: f for f in _drawn(reports["h200"])}
    assert cnn["precision"].panels == ("samples/s", "J/sample")


def test_left_out_is_one_line_per_reason(reports: dict[str, Report]) -> None:
    check = reports["h200"]
    omitted = [(f.title, f.omitted) for f in check.figures if f.omitted]
    assert len(omitted) == 11  # four models with one GPU count, three with one batch
    lines = omitted_lines(omitted)
    assert lines == [
        "time per mini-batch vs GPUs: GPUs: one count only (1) (fcn-r, alexnet-r, "
        "resnet-50, resnet-56)",
        "scaling with GPUs: no configuration ran on several GPUs counts with its 1-device "
        "baseline (fcn-r, alexnet-r, resnet-50, resnet-56)",
        "throughput and GPU memory vs batch size: one batch size only (128, 1024) "
        "(fcn-r, alexnet-r, resnet-56)"]
    page = "\n".join(html.page_parts(check, draw=lambda spec: "<svg></svg>"))
    assert "omitted:" not in page and page.count("<h2>Not drawn</h2>") == 1
    assert page.count('<ul class="omitted"') == 1 and page.count("<li>one count") == 0
    # 17 configurations with too few readings: one clause, not 17 (the 25-line wall)
    energy = next(f for f in check.figures if f.key == "power-energy")
    assert energy.caption.count("readings not counted") == 1
    assert "left out, too few readings: 17 configurations (fcn-r 4, alexnet-r 6, " \
        "resnet-50 3, resnet-56 4) (window 0.024–0.67 s, readings not counted (set " \
        "min_time_s))" in energy.caption
    assert len(energy.caption) < 700
    precision = next(f for f in check.figures if f.key == "precision")
    assert "J/sample left out, too few readings: 17 configurations (fcn-r 4, alexnet-r 6, " \
        "resnet-50 3, resnet-56 4) (window 0.024–0.67 s" in precision.caption
    # the cancelled H100 check: its configurations without an ok run, counted once
    assert reports["h100"].left_out.startswith(
        "Left out of the figures: 5 configurations without an ok run (cancelled 5)")
    assert reports["h200"].left_out == ""


def test_caption_text_groups_reasons_and_names_few() -> None:
    assert caption_text("left out", []) == ""
    assert caption_text("left out", [("a b1", "n/a: window 0.1 s"), ("c b2", "n/a: 0 readings")]) \
        == "left out: a b1 (window 0.1 s); c b2 (0 readings)"
    many = [(f"m{i % 2} b{i}", f"n/a: window 0.{i + 1} s") for i in range(8)]
    assert caption_text("left out", many) == \
        "left out: 8 configurations (m0 4, m1 4) (window 0.1–0.8 s)"


def test_panels_side_by_side_share_their_dashes(reports: dict[str, Report]) -> None:
    # gpt2-small generate: the memory panel lacks the CUDA-graph run's reading; its one
    # line must keep the dash it has beside (cuda graphs off), not turn solid
    fig = next(f for f in reports["llm"].figures if f.key == "batch-gpt2-small")
    spec = specs.spec(fig, specs.SCREEN)
    generate = spec["vconcat"][1]["hconcat"]
    domains = [layer["encoding"]["strokeDash"]["scale"]["domain"] for panel in generate
               for layer in panel["layer"] if "strokeDash" in layer["encoding"]]
    assert domains == [["cuda graphs", "cuda graphs off"]] * 2


def test_a_mode_mixing_transformers_and_cnns_gets_a_row_per_unit() -> None:
    # the H200 check's CNNs and the transformer campaign's runs, as one set
    from dltop.report.energy import energy_figure
    from dltop.results import identity
    from dltop.results.aggregate import config_results
    from dltop.results.places import placed_identities

    results = []
    for name in ("h200", "llm"):
        db = sqlite_utils.Database(sqlite3.connect(
            f"file:{RUNS / DATABASES[name]}?mode=ro", uri=True))
        ensure_views(db.conn)
        results += config_results(db, [1])
    fig = energy_figure(results, identity.variation(placed_identities(results)))
    assert fig.title == "GPU power and energy per sample or token per framework"
    units = {(r["facet"], r["panel"]) for r in fig.rows if r["panel"] != "power W"}
    assert units == {("training, other models", "J/sample"),
                     ("training, transformers", "J/token"), ("generation", "J/token")}
    rows = specs.spec(fig, specs.SCREEN)["vconcat"]
    assert len(rows) == 3
    for row in rows:  # each row one unit: J/sample and J/token never share an axis
        panels = {layer["encoding"]["x"]["title"].split(" (")[0] for p in row["hconcat"]
                  for layer in p["layer"][:1]}
        assert len(panels - {"power W"}) == 1, panels
