"""The time-vs-GPUs and scaling figures of a campaign that varies mode and precision, drawn
by a real headless Chromium (issue 31 item 1): each mode on its own axes, training first,
precision the colour, no two axis labels over each other, no console error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from .test_report_page import LABEL_BOXES_JS, _figures, _reportdb

Browser = Any

TITLES_JS = """
var fig = document.getElementById(arguments[0]);
return Array.from(fig.querySelectorAll('svg g.role-title text, svg g.role-legend text'))
  .map(function (t) { return {text: t.textContent, y: t.getBoundingClientRect().top}; });
"""


def modes_page(tmp_path: Path) -> Path:
    """The report of fcn-r on 1 and 2 simulated GPUs, training and inference, fp32 and
    bf16, one framework (tests/report/reportdb.py)."""
    rdb = _reportdb()
    db = rdb.connect(tmp_path / "modes.db")
    rdb.add_campaign(db, rdb.modes_profile("modes", '["torch"]', ("train", "inference"),
                                           devices='["gpu:1", "gpu:2"]'), "modes", gpu=True)
    db.close()
    out = tmp_path / "modes.html"
    res = subprocess.run([sys.executable, "-m", "dltop", "report", "--db",
                          str(tmp_path / "modes.db"), "-o", str(out), "--max-runs", "1"],
                         capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, res.stderr
    return out


def test_modes_never_share_axes_and_precision_is_the_colour(browser: Browser,
                                                            tmp_path: Path) -> None:
    browser.open(modes_page(tmp_path))
    assert browser.console_errors() == []
    by_id = {f["id"]: f for f in _figures(browser)}
    for key in ("time-fcn-r-gpu", "scaling-fcn-r-gpu"):
        assert by_id[key]["marks"] > 10 and by_id[key]["width"] > 300, key
        texts = browser.script(TITLES_JS, key)
        assert isinstance(texts, list)
        y = {t["text"]: t["y"] for t in texts}
        assert y["train"] < y["inference"], key  # a row of axes per mode, training first
        assert {"precision", "fp32", "bf16"} <= set(y), key  # the colour's legend
        boxes = [b for b in browser.script(LABEL_BOXES_JS, key)  # type: ignore[union-attr]
                 if b["w"] > 0]
        for i, a in enumerate(boxes):  # no two axis labels overlap on the page
            for b in boxes[i + 1:]:
                apart = (a["x"] + a["w"] <= b["x"] + 0.5 or b["x"] + b["w"] <= a["x"] + 0.5
                         or a["y"] + a["h"] <= b["y"] + 0.5 or b["y"] + b["h"] <= a["y"] + 0.5)
                assert apart, (key, a["text"], b["text"])
    assert "same for every line: torch" in browser.text()
