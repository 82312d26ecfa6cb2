"""Issue 38: every command works on a stdout that is not UTF-8.

Under ``PYTHONIOENCODING=latin-1`` (or ascii, or the C locale without UTF-8 mode)
``dltop export`` died with UnicodeEncodeError on the ``†`` of a packed campaign's
note, and ``dltop run`` lost its progress (the first ``…`` or ``→`` failed the
display, which then went quiet for the rest of the campaign). Now the CLI's streams
write ASCII stand-ins for what their encoding lacks (:mod:`dltop.cli.common`). The
campaign is a real ``dltop run`` of ``tests/programs/steps.py``, named and labelled
with characters latin-1 lacks.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.textsafe import register_stand_ins, stand_in

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"
NAME = "enc † … ≥ run"
ENCODINGS = {
    "latin-1": {"PYTHONIOENCODING": "latin-1"},
    "ascii": {"PYTHONIOENCODING": "ascii"},
    "C locale": {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""},
}


def dltop(db: Path, encoding: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "DLTOP_DB": str(db), **ENCODINGS[encoding]}
    res = subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                         timeout=180, env={k: v for k, v in env.items() if v})
    # what the terminal gets: bytes in its encoding (latin-1 reads any byte)
    out, err = res.stdout.decode("latin-1"), res.stderr.decode("latin-1")
    assert "Traceback" not in out + err, out + err
    assert "UnicodeEncodeError" not in out + err, out + err
    if encoding != "latin-1":
        assert res.stdout.isascii() and res.stderr.isascii(), (res.stdout, res.stderr)
    return res.returncode, out, err


def write_profile(tmp: Path) -> Path:
    prof = tmp / "p.toml"
    prof.write_text(
        f"name = {json.dumps(NAME, ensure_ascii=False)}\n"
        "[defaults]\niterations = 2\nwarmup = 1\n[[matrix]]\nframeworks = [\"command\"]\n"
        'models = ["m†", "café"]\nbatch_sizes = [8]\ndevices = ["cpu:1"]\n'
        f"command = {json.dumps([sys.executable, str(STEPS), '{total}', '0.01'])}\n")
    return prof


@pytest.fixture(scope="module")
def latin1_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``dltop run`` with a latin-1 stdout: its database and what it printed."""
    tmp = tmp_path_factory.mktemp("enc")
    code, out, err = dltop(tmp / "d.db", "latin-1", "run", "--headless",
                           str(write_profile(tmp)))
    assert code == 0, out + err  # the runners' logs are UTF-8: a `†` label runs ok
    return tmp / "d.db", out + err


@pytest.mark.slow
def test_run_shows_its_progress_on_a_latin1_stdout(latin1_run: tuple[Path, str]) -> None:
    _, shown = latin1_run
    assert "progress display failed" not in shown
    assert "campaign 1 enc + ... >= run: 2 runs -> " in shown  # the stand-ins
    assert "[1/2] command m+ b8 cpu:1 #1 ..." in shown
    assert "[2/2] command caf\xe9 b8 cpu:1 #1  ok" in shown  # latin-1 has é: kept
    assert "campaign 1 finished" in shown


@pytest.mark.slow
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_read_commands_work_on_a_narrow_stdout(latin1_run: tuple[Path, str], tmp_path: Path,
                                               encoding: str) -> None:
    db, _ = latin1_run
    code, out, _ = dltop(db, encoding, "export")
    assert code == 0 and out.startswith("Campaign 1 `enc + ... >= run`"), out
    code, out, _ = dltop(db, encoding, "export", "--table", "summary", "--format", "csv")
    assert code == 0 and "m+" in out
    code, out, _ = dltop(db, encoding, "export", "-o", str(tmp_path / "t.md"))
    assert code == 0, out  # the file is UTF-8, whatever the terminal takes
    assert (tmp_path / "t.md").read_text(encoding="utf-8").startswith(f"Campaign 1 `{NAME}`")
    code, out, _ = dltop(db, encoding, "status")
    assert code == 0 and "`enc + ... >= run`" in out, out
    code, out, _ = dltop(db, encoding, "runs")
    assert code == 0 and "m+" in out
    code, out, _ = dltop(db, encoding, "profiles", "show", str(write_profile(tmp_path)))
    assert code == 0 and "# enc + ... >= run" in out, out
    code, out, _ = dltop(db, encoding, "--help")
    assert code == 0 and "usage: dltop" in out
    code, _, err = dltop(db, encoding, "export", "--campaign", "ø†")
    assert code == 2 and "dltop: error:" in err  # the error line, not a traceback


def test_interactive_progress_on_a_latin1_terminal() -> None:
    """The Rich bars on a latin-1 terminal: ASCII bar, the label's `†` as `+`."""
    from rich.console import Console

    from dltop.jobs.events import CampaignStarted, RunFinished, RunProgress, RunStarted
    from dltop.profiles.loader import parse
    from dltop.tui.progress import HeadlessProgress

    job = parse('[[matrix]]\nframeworks = ["command"]\nmodels = ["m†"]\nbatch_sizes = [8]\n'
                'devices = ["cpu:1"]\ncommand = ["/bin/true"]\n', "p.toml", "p").jobs[0]
    raw = io.BytesIO()
    term = io.TextIOWrapper(raw, encoding="latin-1", errors=register_stand_ins())
    console = Console(file=term, force_terminal=True, width=120)
    with HeadlessProgress(interactive=True, console=console) as progress:
        progress(CampaignStarted(1, NAME, 1, "d.db"))
        progress(RunStarted(1, 1, 0, 1, job, ""))
        progress(RunProgress(1, 0, 3, True, 0.01, None))
        progress(RunFinished(1, job, "ok", 0.01, 800.0, 0.0, False, ""))
    term.flush()
    shown = raw.getvalue().decode("latin-1")
    assert "progress display failed" not in shown
    assert "campaign 1 \x1b[1menc + ... >= run\x1b[0m: 1 run -> d.db" in shown
    assert "[1/1] command m+ b8 cpu:1 #1 (warm-up) " in shown  # the bar, ASCII
    assert "0.0100 s/iter  800.0 samples/s" in shown  # the finished line
    assert "-" * 20 in shown  # Rich drew its bar in ASCII (its encoding is not UTF)


def test_stand_ins() -> None:
    assert [stand_in(c) for c in "†…±≥×→é☃─│┼\U0001f600"] == [
        "+", "...", "+/-", ">=", "x", "->", "\\xe9", "\\u2603", "-", "|", "+",
        "\\U0001f600"]
    name = register_stand_ins()
    assert "a†b ✓".encode("ascii", name) == b"a+b ok"
    assert "±×é†".encode("latin-1", name) == "±×é+".encode("latin-1")
