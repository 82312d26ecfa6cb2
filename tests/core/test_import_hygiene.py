"""The headless core never imports Textual or Rich (checked in a fresh interpreter)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import dltop

CORE_PACKAGES = ("profiles", "jobs", "runners", "store", "telemetry", "results")


def core_modules() -> list[str]:
    mods = ["dltop", "dltop.errors", "dltop.catalog"]
    for info in pkgutil.walk_packages(dltop.__path__, "dltop."):
        top = info.name.split(".")[1]
        if top in CORE_PACKAGES and ".child." not in info.name + ".":
            mods.append(info.name)
    return mods


def test_core_modules_do_not_import_textual_or_rich() -> None:
    mods = core_modules()
    assert "dltop.jobs.engine" in mods and "dltop.store.writer" in mods
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"core pulled in: {out.stdout.strip()}"


def test_the_check_would_notice_rich() -> None:
    out = subprocess.run([sys.executable, "-c",
                          "import dltop.tui.progress, sys; print('rich' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
