"""A real headless Chromium (Debian's, through selenium and chromedriver) for browser tests.

``browser`` opens a URL or a local file, returns what the page logged as errors on the
console, reads the page's text and saves a screenshot. A missing Chromium or chromedriver
FAILS the test with a message: ``.ci/run`` installs both (``apt-get install chromium
chromium-driver``); a browser test must never pass as a skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("DLTOP_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("DLTOP_CHROMEDRIVER", "/usr/bin/chromedriver")
INSTALL_HINT = ("`.ci/run` installs them (apt-get install chromium chromium-driver); "
                "DLTOP_CHROMIUM / DLTOP_CHROMEDRIVER name other paths")


def _executable(path: str) -> str | None:
    """``path`` when it is an executable file, else the same name found on PATH."""
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return shutil.which(os.path.basename(path))


class Browser:
    """One headless Chromium window driven by selenium.

    Args:
        driver: the selenium Chrome webdriver (owned by the fixture, which quits it).
    """

    def __init__(self, driver: object) -> None:
        self.driver = driver  # selenium.webdriver.Chrome; typed loosely for import cost

    def open(self, target: str | Path) -> None:
        """Load ``target``: an ``http(s)://`` URL, or a local file path."""
        url = str(target)
        if not url.startswith(("http://", "https://", "file://")):
            url = Path(url).resolve().as_uri()
        self.driver.get(url)  # type: ignore[attr-defined]

    def console_logs(self) -> list[dict[str, object]]:
        """Every console entry logged since the last call (the browser drains its buffer)."""
        return list(self.driver.get_log("browser"))  # type: ignore[attr-defined]

    def console_errors(self) -> list[str]:
        """Messages of the console entries at level SEVERE since the last call."""
        return [str(e.get("message")) for e in self.console_logs()
                if e.get("level") == "SEVERE"]

    def text(self) -> str:
        """The visible text of the page's body."""
        from selenium.webdriver.common.by import By
        return str(self.driver.find_element(By.TAG_NAME, "body").text)  # type: ignore[attr-defined]

    def script(self, js: str, *args: object) -> object:
        """Run ``js`` in the page and return its result."""
        return self.driver.execute_script(js, *args)  # type: ignore[attr-defined]

    def screenshot(self, path: str | Path) -> Path:
        """Save a PNG of the viewport at ``path`` (parents created) and return the path."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not self.driver.save_screenshot(str(out)):  # type: ignore[attr-defined]
            raise AssertionError(f"chromium could not write a screenshot to {out}")
        return out


def start_chromium(width: int = 1280, height: int = 800) -> object:
    """A selenium webdriver on the real Chromium, or a failed test saying how to install it."""
    chromium, driver = _executable(CHROMIUM), _executable(CHROMEDRIVER)
    if chromium is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", chromium), ("chromedriver", driver))
                               if p is None)
        pytest.fail(f"{missing} not found ({CHROMIUM}, {CHROMEDRIVER}): {INSTALL_HINT}",
                    pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", f"--window-size={width},{height}", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars"):
        opts.add_argument(arg)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # Chromium refuses to start its sandbox as root
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=driver))


@pytest.fixture
def browser() -> Iterator[Browser]:
    """A fresh headless Chromium for one test (quit afterwards)."""
    driver = start_chromium()
    try:
        yield Browser(driver)
    finally:
        driver.quit()  # type: ignore[attr-defined]
