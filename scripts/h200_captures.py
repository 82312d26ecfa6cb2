"""Re-take the H200 captures in docs/captures/ (issue 31): the report of the first GPU
check drawn in a real headless Chromium, and the TUI's queue and run detail of it.

Reads a copy of docs/gpu-runs/2026-11-26-h200-check/gpu-check.db (never the original).
Every H200 configuration ran on one GPU, so the time-vs-GPUs and scaling figures are
omitted there: report-modes-*.png draws them from a SIMULATED campaign instead (fcn-r on
1 and 2 fake GPUs, training and inference, fp32 and bf16: tests/report/reportdb.py), to
show their encodings (a row of axes per mode, precision the colour).

    PYTHONPATH=src .venv/bin/python scripts/h200_captures.py [--out docs/captures]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DB = ROOT / "docs/gpu-runs/2026-11-26-h200-check/gpu-check.db"
FIGURES = ("precision", "power-energy", "batch-resnet-50", "run-1")
OTHERS = {  # issue 40: a row of panels per mode in tokens; the CUDA-graph point labelled
    ROOT / "docs/gpu-runs/2026-11-26-h200-llm/campaign.db": {
        "power-energy": "report-h200-llm-power-energy.png",
        "batch-gpt2-small": "report-h200-llm-batch.png"},
    ROOT / "docs/gpu-runs/2026-11-26-h200-check/options.db": {
        "batch-resnet-50": "report-h200-options-batch.png"}}


MODES = {"time-fcn-r-gpu": "report-modes-time.png",
         "scaling-fcn-r-gpu": "report-modes-scaling.png"}


def modes_db(work: Path) -> Path:
    """The simulated modes × precisions campaign (tests/report/reportdb.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from report import reportdb  # type: ignore[import-not-found]

    db = reportdb.connect(work / "modes.db")
    reportdb.add_campaign(db, reportdb.modes_profile(
        "modes", '["torch"]', ("train", "inference"), devices='["gpu:1", "gpu:2"]'),
        "modes", gpu=True)
    db.close()
    return work / "modes.db"


def report_pngs(db: Path, out: Path, work: Path, shots: dict[str, str]) -> None:
    """Figures of the HTML page (element id → file name), as Chromium draws them."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    page = work / f"{db.stem}.html"
    subprocess.run([sys.executable, "-m", "dltop", "report", "--db", str(db), "-o", str(page),
                    "--max-runs", "2"], check=True)
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--window-size=1400,4000", "--disable-gpu", "--no-sandbox",
                "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts,
                              service=Service(executable_path="/usr/bin/chromedriver"))
    try:
        driver.get(page.as_uri())
        for key, name in shots.items():
            driver.find_element(By.ID, key).screenshot(str(out / name))
    finally:
        driver.quit()


async def tui_svgs(db: Path, out: Path) -> None:
    """The main screen (queue with its settings column) and run 1's detail, 160x50."""
    sys.path.insert(0, str(ROOT / "tests"))
    from types import SimpleNamespace

    from dltop.tui.rundetail import RunDetailScreen
    from tui.conftest import make_app  # type: ignore[import-not-found]

    app = make_app(SimpleNamespace(db_path=db), gpus=1)
    async with app.run_test(size=(160, 50)) as pilot:
        await app.refresh_now()
        await pilot.pause(1)
        app.save_screenshot(filename="main-h200-160x50.svg", path=str(out))
        screen = RunDetailScreen(db, 1)
        app.push_screen(screen)
        while not screen.loads:
            await pilot.pause(0.1)
        await pilot.pause(3)  # the charts are built in workers
        app.save_screenshot(filename="rundetail-h200-160x50.svg", path=str(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs/captures")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(shutil.copy(DB, Path(tmp) / DB.name))
        report_pngs(db, args.out, Path(tmp), {k: f"report-h200-{k}.png" for k in FIGURES})
        report_pngs(modes_db(Path(tmp)), args.out, Path(tmp), MODES)
        for i, (other, shots) in enumerate(OTHERS.items()):
            (Path(tmp) / str(i)).mkdir()
            report_pngs(Path(shutil.copy(other, Path(tmp) / str(i) / other.name)), args.out,
                        Path(tmp) / str(i), shots)
        asyncio.run(tui_svgs(db, args.out))


if __name__ == "__main__":
    main()
