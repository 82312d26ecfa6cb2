"""The renderers draw any Table: a new key or metric column is data, not renderer code."""

from __future__ import annotations

import csv
import io
import json

import pytest

from dltop.results.render import render
from dltop.results.table import Cell, Column, Layout, Role, Row, Table, key_cell

COLUMNS = (Column("model", "model", Role.KEY, latex_header="Model"),
           Column("precision", "precision", Role.KEY),
           Column("median_s", "s/iter", Role.VALUE, "s"),
           Column("mem_gib", "memory", Role.VALUE, "GiB"))
ROWS = (Row((key_cell("fcn-r"), key_cell("fp16"), Cell("0.2500", 0.25, "ok"),
             Cell("1.5", 1.5, "ok"))),
        Row((key_cell("lstm"), key_cell("fp32"), Cell("OOM", None, "oom"), None),
            {"status": "oom"}))


def _table(layout: Layout = Layout.FLAT) -> Table:
    return Table("T_1", COLUMNS, ROWS, notes=("note",), meta={"title": "T_1"}, layout=layout)


def test_every_format_draws_every_column() -> None:
    md = render(_table(), "md").splitlines()
    assert md[2:5] == ["| model | precision | s/iter | memory |", "|---|---|---:|---:|",
                       "| fcn-r | fp16 | 0.2500 | 1.5 |"]
    assert md[-1] == "note"
    rows = list(csv.reader(io.StringIO(render(_table(), "csv"))))
    assert rows == [["# T_1"],
                    ["model", "precision", "s/iter", "s/iter status", "memory", "memory status"],
                    ["fcn-r", "fp16", "0.25", "ok", "1.5", "ok"],
                    ["lstm", "fp32", "", "OOM", "", ""]]
    tex = render(_table(), "latex").splitlines()
    assert tex[:3] == ["% T\\_1", "% note", "\\begin{tabular}{llrr}"]
    assert tex[4] == "Model & precision & s/iter & memory \\\\"
    doc = json.loads(render(_table(), "json"))
    assert doc["rows"][1] == {"model": "lstm", "precision": "fp32", "median_s": None,
                              "mem_gib": None, "status": "oom"}


def test_pivot_json_nests_value_cells() -> None:
    doc = json.loads(render(_table(Layout.PIVOT), "json"))
    assert [c["key"] for c in doc["columns"]] == ["model", "precision", "median_s", "mem_gib"]
    assert doc["columns"][2] == {"key": "median_s", "header": "s/iter", "role": "value",
                                 "unit": "s"}
    assert doc["rows"][0]["cells"]["median_s"] == {"value": 0.25, "status": "ok",
                                                   "label": "0.2500"}
    assert doc["rows"][1]["cells"]["mem_gib"] is None


def test_a_row_must_fill_every_column() -> None:
    with pytest.raises(ValueError, match="row has 1 cells for 4 columns"):
        Table("t", COLUMNS, (Row((key_cell("x"),)),))
    with pytest.raises(ValueError, match="format must be one of"):
        render(_table(), "html")
