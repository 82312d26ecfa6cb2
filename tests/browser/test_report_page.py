"""The ``dltop report`` page in a real headless Chromium, opened from file://.

No console errors, every figure drawn (a non-empty ``<svg>`` holding its title), the
summary table sorts on a header click and the run selector shows the chosen run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

Browser = Any
"""tests/browser/conftest.py's Browser (conftest modules are not importable by name)."""



def _reportdb() -> ModuleType:
    """tests/report/reportdb.py: the campaigns the report tests store."""
    path = Path(__file__).parents[1] / "report" / "reportdb.py"
    spec = importlib.util.spec_from_file_location("report_reportdb", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(tmp_path: Path, campaign: str) -> Path:
    db = _reportdb().build_report_db(tmp_path / "report.db")
    out = tmp_path / f"report-{campaign}.html"
    res = subprocess.run([sys.executable, "-m", "dltop", "report", "--db", str(db),
                          "--campaign", campaign, "-o", str(out)],
                         capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, res.stderr
    return out


FIGURES_JS = """
return Array.from(document.querySelectorAll('figure')).map(function (f) {
  var svg = f.querySelector('svg'), box = svg ? svg.getBoundingClientRect() : null;
  return {id: f.id, hidden: f.hidden, marks: svg ? svg.querySelectorAll('path').length : 0,
          width: box ? box.width : 0, text: svg ? svg.textContent : ''};
});
"""


def _figures(browser: Browser) -> list[dict[str, Any]]:
    out = browser.script(FIGURES_JS)
    assert isinstance(out, list)
    return out


def _column(browser: Browser, index: int) -> list[str]:
    out = browser.script("return Array.from(document.querySelectorAll('#summary tbody tr'))"
                         f".map(function (r) {{ return r.cells[{index}].textContent; }});")
    assert isinstance(out, list)
    return [str(x) for x in out]


def test_report_renders_every_figure_without_console_errors(browser: Browser,
                                                            tmp_path: Path) -> None:
    browser.open(_page(tmp_path, "2"))
    assert browser.console_errors() == []
    figs = _figures(browser)
    titles = {"time-fcn-r-gpu": "fcn-r: time per mini-batch vs GPUs",
              "scaling-fcn-r-gpu": "fcn-r: scaling with GPUs",
              "power-energy": "GPU power and energy per sample per framework"}
    by_id = {f["id"]: f for f in figs}
    for key, title in titles.items():
        assert title in by_id[key]["text"], key
        assert by_id[key]["marks"] > 5 and by_id[key]["width"] > 300, key
    runs = [f for f in figs if f["id"].startswith("run-")]
    assert len(runs) == 4 and [f["hidden"] for f in runs] == [False, True, True, True]
    assert runs[0]["marks"] > 5 and "s/iter" in runs[0]["text"]
    assert "one batch size only (8)" in browser.text()
    # the selector shows the chosen run and hides the others
    browser.script("var s = document.getElementById('run-select'); s.selectedIndex = 2;"
                   "s.dispatchEvent(new Event('change'));")
    shown = [f["id"] for f in _figures(browser) if f["id"].startswith("run-")
             and not f["hidden"]]
    assert shown == [runs[2]["id"]]
    rendered = next(f for f in _figures(browser) if f["id"] == runs[2]["id"])
    assert rendered["width"] > 300
    assert browser.console_errors() == []


def test_summary_table_sorts_on_a_header_click(browser: Browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.open(_page(tmp_path, "1"))
    headers = browser.driver.find_elements(By.CSS_SELECTOR, "#summary th")
    names = [h.text for h in headers]
    median = names.index("median s")
    before = _column(browser, median)
    headers[median].click()
    up = _column(browser, median)
    numbers = [float(x) for x in up if x[:1].isdigit()]
    assert numbers == sorted(numbers) and up != before
    assert up[-1] == "OOM"  # a cell without a number sorts after the numbers
    headers[median].click()
    down = [float(x) for x in _column(browser, median) if x[:1].isdigit()]
    assert down == sorted(numbers, reverse=True)
    assert headers[median].get_attribute("aria-sort") == "descending"
    fail = browser.script("var r = document.querySelector('#summary tr.fail');"
                          "return [getComputedStyle(r.cells[0]).backgroundColor,"
                          " r.querySelector('td.reason').textContent];")
    assert isinstance(fail, list)
    assert fail[0] == "rgb(253, 236, 234)" and fail[1].startswith("CUDA out of memory")
    assert browser.console_errors() == []


H200 = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-check/gpu-check.db"

LABEL_BOXES_JS = """
var fig = document.getElementById(arguments[0]);
return Array.from(fig.querySelectorAll('svg g.role-axis-label text')).map(function (t) {
  var b = t.getBoundingClientRect();
  return {text: t.textContent, x: b.left, y: b.top, w: b.width, h: b.height};
});
"""


def test_h200_report_bars_do_not_overprint_and_runs_are_told_apart(
        browser: Browser, tmp_path: Path) -> None:
    out = tmp_path / "h200.html"
    res = subprocess.run([sys.executable, "-m", "dltop", "report", "--db",
                          str(_copy(H200, tmp_path)),
                          "-o", str(out), "--max-runs", "4"],
                         capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, res.stderr
    browser.open(out)
    assert browser.console_errors() == []
    by_id = {f["id"]: f for f in _figures(browser)}
    assert by_id["precision"]["marks"] > 20 and "resnet-50" in by_id["precision"]["text"]
    for key in ("power-energy", "precision"):
        boxes = [b for b in browser.script(LABEL_BOXES_JS, key)  # type: ignore[union-attr]
                 if b["w"] > 0]
        assert len(boxes) > 4, key
        for i, a in enumerate(boxes):  # no two axis labels overlap on the page
            for b in boxes[i + 1:]:
                apart = (a["x"] + a["w"] <= b["x"] + 0.5 or b["x"] + b["w"] <= a["x"] + 0.5
                         or a["y"] + a["h"] <= b["y"] + 0.5 or b["y"] + b["h"] <= a["y"] + 0.5)
                assert apart, (key, a["text"], b["text"])
    options = browser.script("return Array.from(document.querySelectorAll('#run-select option'))"
                             ".map(function (o) { return o.textContent; });")
    assert isinstance(options, list)
    assert options[0].startswith("run 1: torch resnet-50 b256 gpu:1 bf16")
    assert options[1].startswith("run 2: torch resnet-50 b256 gpu:1 fp16")
    browser.screenshot(tmp_path / "h200.png")


def _copy(db: Path, tmp_path: Path) -> Path:
    """A writable copy: the report opens its database as the CLI does."""
    import shutil

    return Path(shutil.copy(db, tmp_path / db.name))


LLM = Path(__file__).parents[2] / "docs/gpu-runs/2026-11-26-h200-llm/campaign.db"

FIT_JS = """
var scroll = document.querySelector('div.scroll');
return {page: document.documentElement.scrollWidth, inner: window.innerWidth,
        table: [scroll.scrollWidth, scroll.clientWidth],
        body: document.body.getBoundingClientRect().right,
        figs: Array.from(document.querySelectorAll('figure:not([hidden]) svg')).map(
          function (s) { var b = s.getBoundingClientRect(), v = s.viewBox.baseVal;
                         return [s.closest('figure').id, b.right, b.width, b.height,
                                 v.width, v.height]; })};
"""


def test_the_widest_gpu_report_fits_1400_px(browser: Browser, tmp_path: Path) -> None:
    # the H200 transformer campaign's page was 1 582 px wide (issue 40)
    out = tmp_path / "llm.html"
    res = subprocess.run([sys.executable, "-m", "dltop", "report", "--db",
                          str(_copy(LLM, tmp_path)), "-o", str(out), "--max-runs", "1"],
                         capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, res.stderr
    browser.driver.set_window_size(1400, 900)
    browser.open(out)
    assert browser.console_errors() == []
    fit = browser.script(FIT_JS)
    assert isinstance(fit, dict)
    assert fit["inner"] == 1400 and fit["page"] <= 1400, fit
    wide, box = fit["table"]
    assert wide > box  # the summary is wider than the column: it scrolls in its own box
    assert {f[0] for f in fit["figs"]} >= {"batch-gpt2-small", "power-energy"}
    for key, right, width, height, view_w, view_h in fit["figs"]:
        assert right <= fit["body"] + 0.5, key  # within the column
        assert abs(height / width - view_h / view_w) < 0.01, key  # scaled, not squeezed
    text = browser.text()
    assert "Not drawn" in text and "omitted:" not in text
    browser.screenshot(tmp_path / "llm.png")
