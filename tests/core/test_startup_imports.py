"""The quick commands stay quick: what ``dltop.cli`` and ``status | runs | export`` load.

Start-up time is measured by ``benchmarks/startup.py``; this checks its cause without
timing anything: a fresh interpreter runs the command and reports which heavy
modules it loaded. sqlite-utils alone takes ~0.1 s (and loads numpy), Textual ~0.2 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dltop.profiles.loader import parse
from dltop.results.stats import summarize_run
from dltop.store import Store, connect

HEAVY = ("numpy", "pandas", "textual", "sqlite_utils", "torch", "tensorflow", "cntk", "jax",
         "asyncio", "dltop.jobs.engine", "dltop.jobs.supervisor", "dltop.store.writer",
         "dltop.telemetry.sampler", "dltop.telemetry.nvml")
"""Never loaded by ``import dltop.cli`` or by the read-only commands."""


def loaded(code: str) -> set[str]:
    """Which of HEAVY (and rich) a fresh interpreter has loaded after ``code``."""
    probe = (f"{code}\nimport sys\n"
             f"print(' '.join(m for m in {(*HEAVY, 'rich')!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    return set(out.stdout.split())


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "small.db"
    store = Store(connect(path))
    prof = parse('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                 'batch_sizes = [8, 16]\ndevices = ["cpu:1"]\n', "s.toml", "s")
    cid = store.create_campaign("s", ["s.toml"], ["dltop"], "h", 1, None)
    for job_id in store.add_jobs(cid, prof.jobs):
        run_id = store.start_run(job_id, cid, 1, "", 8)
        seconds = [0.01, 0.011, 0.012]
        store.add_iterations(run_id, [{"idx": i, "seconds": s, "samples": 8, "warmup": 0,
                                       "loss": None} for i, s in enumerate(seconds)])
        store.finish_run(run_id, job_id, "ok", summarize_run(seconds, 8).to_columns())
    return path


def test_importing_the_cli_loads_no_command() -> None:
    assert loaded("import dltop.cli") == set()


@pytest.mark.parametrize("module", ["dltop.cli.control", "dltop.cli.results",
                                    "dltop.store.reader", "dltop.results.export",
                                    "dltop.live.campaign"])
def test_read_path_modules_load_nothing_heavy(module: str) -> None:
    assert loaded(f"import {module}") == set()


@pytest.mark.parametrize(("argv", "allowed"), [
    (["status"], set()),
    (["export"], set()),
    (["export", "--table", "summary"], set()),
    (["runs"], set()),  # a table that fits is drawn in Rich's look without Rich
    (["--version"], set()),
])
def test_quick_commands_load_nothing_heavy(small_db: Path, argv: list[str],
                                           allowed: set[str]) -> None:
    db = [] if argv == ["--version"] else ["--db", str(small_db)]
    code = ("import contextlib, io\nfrom dltop.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            f"        code = main({[*argv, *db]!r})\n"
            "    except SystemExit as exc:\n"
            "        code = exc.code\n"
            "assert code == 0 and out.getvalue(), (code, out.getvalue())")
    assert loaded(code) - allowed == set()


def test_the_check_would_notice_sqlite_utils(small_db: Path) -> None:
    code = ("from dltop.cli import main\n"
            f"main(['pause', '--db', {str(small_db)!r}])")  # pause opens the store to write
    probe = f"try:\n    {code.replace(chr(10), chr(10) + '    ')}\nexcept BaseException:\n    pass"
    assert "sqlite_utils" in loaded(probe)
