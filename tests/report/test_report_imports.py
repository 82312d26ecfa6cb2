"""vl-convert (Vega in Deno, 1-2 s to its first figure) loads only when a figure is rendered."""

from __future__ import annotations

import subprocess
import sys

MODULES = ("dltop.cli", "dltop.cli.report", "dltop.cli.results", "dltop.cli.control",
           "dltop.report.data", "dltop.report.html", "dltop.report.figures",
           "dltop.report.specs", "dltop.results.export")


def test_no_module_of_the_report_or_the_quick_commands_imports_vl_convert() -> None:
    code = "".join(f"import {m}\n" for m in MODULES)
    code += "import sys\nprint(sorted(m for m in sys.modules if m.startswith(('vl_convert', " \
            "'textual', 'rich'))))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_rendering_a_figure_does() -> None:
    code = ("import sys\nfrom dltop.report.specs import render\n"
            "render({'mark': 'point', 'data': {'values': [{'a': 1}]}, "
            "'encoding': {'x': {'field': 'a', 'type': 'quantitative'}}}, 'svg')\n"
            "print('vl_convert' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "True"
