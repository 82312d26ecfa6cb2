"""The browser fixture itself: a real Chromium renders a local page, reports its console."""

from __future__ import annotations

from pathlib import Path

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>t</title></head>
<body style="background:#fff"><h1 id="h" style="color:#000">dltop browser fixture</h1>
<script>document.getElementById('h').dataset.ran = 'yes';</script>
<button onclick="console.error('boom from page')" id="b">x</button></body></html>
"""


def test_chromium_renders_a_file_and_reports_console_errors(browser, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    browser.open(page)
    assert "dltop browser fixture" in browser.text()
    assert browser.script("return document.getElementById('h').dataset.ran") == "yes"
    assert browser.console_errors() == []

    browser.script("document.getElementById('b').click()")
    errors = browser.console_errors()
    assert any("boom from page" in e for e in errors), errors

    shot = browser.screenshot(tmp_path / "shot.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 1000
