"""Time-vs-devices and scaling figures pick their encodings from the identity fields that
vary (issue 31 item 1): modes never share axes, precision is the colour (one framework)
or a facet (several), what the figure holds constant is in its caption, and the spread
note names the run label."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltop.report import data, specs, vlsize
from dltop.report.content import Figure, Report
from dltop.results import queries
from dltop.store import connect

from .reportdb import MODES_BLOCK, add_campaign, modes_profile


def report(tmp_path: Path, frameworks: str, modes: tuple[str, ...]) -> Report:
    db = connect(tmp_path / "enc.db")
    cid = add_campaign(db, modes_profile("enc", frameworks, modes), "enc", gpu=False)
    return data.build(db, queries.resolve_campaigns(db, str(cid)))


def figure(rep: Report, key: str) -> Figure:
    return next(f for f in rep.figures if f.key == key)


@pytest.fixture(scope="module")
def one_framework(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return report(tmp_path_factory.mktemp("one"), '["torch"]', ("train", "inference"))


@pytest.mark.parametrize("key", ["time-fcn-r-cpu", "scaling-fcn-r-cpu"])
def test_modes_get_their_own_axes_and_precision_the_colour(one_framework: Report,
                                                           key: str) -> None:
    fig = figure(one_framework, key)
    assert not fig.omitted and fig.extra["color"] == "precision"
    assert {r["facet"] for r in fig.rows} == {"train", "inference"}
    spec = specs.spec(fig, specs.SCREEN)
    rows = spec["vconcat"]
    assert [r["title"]["text"] for r in rows] == ["train", "inference"]  # train first
    for row in rows:  # no view mixes the modes
        views = row.get("hconcat", [row])
        for view in views:
            assert len({v["mode"] for v in view["data"]["values"]}) == 1
            color = next(layer["encoding"]["color"] for layer in view["layer"]
                         if "color" in layer["encoding"])
            assert color["field"] == "color" and color["title"] == "precision"
            assert color["scale"]["domain"] == ["fp32", "bf16"]  # wide to narrow
    # one framework: said once in the caption, not by a colour or in every line
    assert "same for every line: torch" in fig.caption
    assert len({r["series"] for r in fig.rows}) == 4  # 2 modes x 2 precisions
    # the two precisions are told apart by their values, not drawn on one another
    if key.startswith("time"):
        at1 = {(r["facet"], r["color"]): r["seconds"] for r in fig.rows if r["devices"] == 1}
        assert at1[("train", "bf16")] < at1[("train", "fp32")]
        assert at1[("inference", "fp32")] < at1[("train", "fp32")]


def test_the_spread_note_names_the_run_label(one_framework: Report) -> None:
    time = figure(one_framework, "time-fcn-r-cpu")
    # not "torch b8 cpu:1": the model and the fields that vary among the figure's lines
    assert "largest spread" in time.caption
    note = time.caption.split("largest spread", 1)[1].split(";", 1)[0]
    assert "torch fcn-r b8 cpu:" in note and ("fp32" in note or "bf16" in note), note
    scaling = figure(one_framework, "scaling-fcn-r-cpu")
    assert "torch fcn-r b8 cpu:" in scaling.caption.split("samples/s", 2)[-1]


def test_with_several_frameworks_precision_is_a_facet(tmp_path: Path) -> None:
    rep = report(tmp_path, '["torch", "tensorflow"]', ("train",))
    fig = figure(rep, "time-fcn-r-cpu")
    assert fig.extra["color"] == "framework"  # one framework, one colour, in every figure
    assert {r["facet"] for r in fig.rows} == {"fp32", "bf16"}
    spec = specs.spec(fig, specs.SCREEN)
    assert [r["title"]["text"] for r in spec["vconcat"]] == ["fp32", "bf16"]
    assert "same for every line" not in fig.caption  # frameworks and precisions vary
    size, width = vlsize.paper_size(fig)
    assert width == "double" and not size.fit  # a stack of views cannot be fitted


def test_what_the_figure_holds_constant_is_in_its_caption(tmp_path: Path) -> None:
    # precision varies in the campaign (lenet ran fp32) but not among fcn-r's lines
    prof = ('name = "c"\n[defaults]\nrepeats = 2\nwarmup = 2\niterations = 8\n'
            + MODES_BLOCK.format(frameworks='["torch"]', model="fcn-r", mode="train",
                                 precision="bf16", devices='["cpu:1", "cpu:2"]')
            + MODES_BLOCK.format(frameworks='["torch"]', model="lenet", mode="train",
                                 precision="fp32", devices='["cpu:1", "cpu:2"]'))
    db = connect(tmp_path / "c.db")
    cid = add_campaign(db, prof, "c", gpu=False)
    rep = data.build(db, queries.resolve_campaigns(db, str(cid)))
    fig = figure(rep, "time-fcn-r-cpu")
    assert "same for every line: torch, bf16" in fig.caption
    assert all("bf16" not in r["series"] for r in fig.rows)  # said once, not per line
    assert "facet" in fig.rows[0] and {r["facet"] for r in fig.rows} == {""}
