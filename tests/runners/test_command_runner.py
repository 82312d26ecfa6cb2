"""Bring-your-own command: dltop_report helper, regex timing, and their failure modes."""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop.errors import UserError
from dltop.profiles.loader import parse

pytestmark = pytest.mark.slow

REPORTING = """
import sys, time
from dltop_report import step
for i in range(int(sys.argv[1])):
    with step(samples=32) as s:
        time.sleep(0.01)
        s.loss = 1.0 / (i + 1)
"""


@pytest.fixture
def profile(profile_text: Any) -> Callable[..., str]:
    """One job's profile around ``command`` (TOML source) and ``extra`` (TOML lines)."""
    def text(command: str, extra: str = "", framework: str = "command") -> str:
        return profile_text({
            "frameworks": [framework], "models": ["my-net"], "batch_sizes": [32],
            "devices": ["cpu:1"], "warmup": 1, "timeout_s": 60,
            "command": profile_text.raw(command),
        }, extra=extra)

    return text


def run(tmp_path: Path, profile: str) -> tuple[int, list[tuple[object, ...]], str]:
    prof = tmp_path / "p.toml"
    prof.write_text(profile)
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db",
                          str(tmp_path / "d.db"), "--headless", "--no-telemetry"],
                         capture_output=True, text=True, timeout=120)
    if not (tmp_path / "d.db").exists():
        return res.returncode, [], res.stderr
    conn = sqlite3.connect(tmp_path / "d.db")
    rows = conn.execute("select status, n_iterations, median_s, error_message, final_loss "
                        "from runs").fetchall()
    conn.close()
    return res.returncode, rows, res.stderr


def iteration_times(tmp_path: Path) -> list[tuple[int, float]]:
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        return conn.execute("select t_mono_ns, t_wall_s from iterations order by idx").fetchall()
    finally:
        conn.close()


def test_script_reporting_through_dltop_report(tmp_path: Path, profile: Any) -> None:
    script = tmp_path / "train.py"
    script.write_text(REPORTING)
    command = f'["{sys.executable}", "{script}", "{{total}}"]'
    code, rows, err = run(tmp_path, profile(command, "iterations = 4"))
    assert code == 0, err
    ((status, n, median, _, loss),) = rows
    assert (status, n) == ("ok", 4)  # 5 steps ({total}), the first is warm-up
    # steps sleep 0.01 s: a sleep never ends early; the loose ceiling catches a unit slip
    # (10 for ms), not a slow machine
    assert 0.009 < float(median) < 0.5  # type: ignore[arg-type]
    assert loss == pytest.approx(0.2)
    # Each step's end as the program's dltop_report read it (monotonic ns): the steps
    # sleep 0.01 s, so consecutive ends are at least that far apart.
    ends = [r[0] for r in iteration_times(tmp_path)]
    assert len(ends) == 5 and all(b - a >= 9_000_000 for a, b in itertools.pairwise(ends))


def test_regex_over_output_lines(tmp_path: Path, profile: Any) -> None:
    prog = "for i in range(6): print('step %d took 0.012s' % i)"
    code, rows, err = run(tmp_path, profile(f'["{sys.executable}", "-c", "{prog}"]',
                                            'iteration_regex = "took (?P<seconds>[0-9.]+)s"\n'
                                            "iterations = 5"))
    assert code == 0, err
    ((status, n, median, _, _),) = rows
    assert (status, n, median) == ("ok", 5, 0.012)
    assert all(t and wall for t, wall in iteration_times(tmp_path))  # when read


def test_regex_that_never_matches_fails_with_a_reason(tmp_path: Path, profile: Any) -> None:
    code, rows, _ = run(tmp_path, profile(f'["{sys.executable}", "-c", "print(42)"]',
                                          'iteration_regex = "took (?P<seconds>[0-9.]+)s"'))
    assert code == 1
    ((status, _, _, message, _),) = rows
    assert status == "crashed" and "never matched" in str(message)
    # says the program ended by itself (a wrapper that backgrounds the training too)
    assert "; it exited with status 0 after " in str(message) and "  42" in str(message)


def test_failing_command_is_reported(tmp_path: Path, profile: Any) -> None:
    code, rows, _ = run(tmp_path,
                        profile(f'["{sys.executable}", "-c", "import sys; sys.exit(4)"]'))
    assert code == 1
    assert rows[0][0] == "crashed" and "exited with status 4" in str(rows[0][3])


def test_missing_program_is_refused_before_anything_is_stored(tmp_path: Path, profile: Any) -> None:
    code, rows, err = run(tmp_path, profile('["no-such-program-xyz"]'))
    assert code == 2 and "no-such-program-xyz" in err and rows == []


RE = "iteration_regex = 'took (?P<seconds>[0-9.]+)'"


@pytest.mark.parametrize("command,extra,match", [
    ('"python train.py"', "", r"matrix\[0\]\.command: expected a non-empty list of strings"),
    ('["python", "{bogus}"]', "", r"command\[1\]: unknown placeholder \{bogus\} \(known: "
     r"\{batch\}.*\{python:FRAMEWORK\}.*write \{\{ and \}\} for literal braces"),
    ('["python", "{batch[0]}"]', "", r"command\[1\]: unknown placeholder \{batch\[0\]\}"),
    ('["python", "{batch.foo}"]', "", r"unknown placeholder \{batch.foo\}"),
    ('["python", "{batch!r}"]', "", r"unknown placeholder"),
    ('["python", "{python:mxnet}"]', "", r"unknown placeholder \{python:mxnet\}"),
    ('["python", "a}b"]', "", r"a lone '\}' \(write \}\}"),
    ('["python"]', 'iteration_regex = "([0-9]+)"',
     r"iteration_regex: needs one named timing group: \(\?P<seconds>"),
    ('["python"]', "iteration_regex = '(?P<ms>[0-9]+) (?P<samples_per_s>[0-9.]+)'",
     r"iteration_regex: has more than one timing group \(ms, samples_per_s\)"),
    ('["python"]', 'iteration_regex = "("', "invalid regular expression"),
    ('["python"]', 'cwd = "no/such/dir"', r"matrix\[0\]\.cwd: directory .*no/such/dir does "
     "not exist"),
    ('["python"]', 'cwd = "{batch}"', r"cwd: only \{profile_dir\} may be used here"),
    ('["python"]', "env = { N = 4 }", r"matrix\[0\]\.env\.N: expected a string, got 4"),
    ('["python"]', 'env = "N=4"', r"matrix\[0\]\.env: expected a table"),
    ('["python"]', 'env = { N = "{nope}" }', r"env\.N: unknown placeholder \{nope\}"),
    ('["python"]', 'timing = "wall"', r"matrix\[0\]\.timing: unknown value 'wall' \(valid: "
     "regex, line-gap, helper"),
    ('["python"]', 'timing = "regex"', r"timing: timing = \"regex\" needs iteration_regex"),
    ('["python"]', f'{RE}\ntiming = "line-gap"', r"line-gap.*remove the \(\?P<seconds>"),
    ('["python"]', f"{RE}\nsteps_per_match = 0", r"steps_per_match: expected an integer >= 1"),
    ('["python"]', f"{RE}\nsteps_per_match = true", r"steps_per_match: expected an integer"),
    ('["python"]', f'{RE}\ncumulative = "yes"', r"cumulative: expected true or false"),
    ('["python"]', 'timing = "helper"\ncumulative = true', r"cumulative: a running mean needs"),
    ('["python"]', 'preset = "nope"', r"matrix\[0\]\.preset: unknown preset 'nope' \(known: "),
])
def test_bad_command_keys(command: str, extra: str, match: str, profile: Any) -> None:
    with pytest.raises(UserError, match=match):
        parse(profile(command, extra), "p.toml", "p")


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, profile: Any) -> None:
    code, _, err = run(tmp_path, profile('["python", "{batch[0]}"]'))
    assert code == 2 and "unknown placeholder {batch[0]}" in err and "Traceback" not in err
    assert not (tmp_path / "d.db").exists()


def test_placeholders_are_filled_per_job(tmp_path: Path, profile: Any) -> None:
    from dltop.runners.command import launch

    (tmp_path / "train.py").write_text("")
    text = profile('["{python}", "train.py", "{batch}", "{total}", "{{x}}", "{profile_dir}/d",'
                   ' "{device}", "{threads}"]', 'env = { B = "{batch}" }')
    prof = parse(text, "p.toml", "p", profile_dir=tmp_path)
    (job,) = prof.jobs
    assert dict(job.options)["command"][4:6] == ("{{x}}", f"{tmp_path}/d")
    go = launch(job)
    assert go.argv == (sys.executable, "train.py", "32", "51", "{x}", f"{tmp_path}/d",
                       "cpu:1", "1")
    assert go.cwd == str(tmp_path) and dict(go.env)["B"] == "32"


def test_preflight_notes_a_bare_python_and_refuses_a_missing_script(
        tmp_path: Path, profile: Any) -> None:
    from dltop.jobs import campaign

    (tmp_path / "train.py").write_text("")
    bare = parse(profile('["python", "train.py"]'), "p.toml", "p", profile_dir=tmp_path)
    plan = campaign.preflight([bare], 0, False)
    assert plan.problems == (None,)
    assert [w for w in plan.warnings if w.startswith("command: 'python' runs dltop's "
                                                      "interpreter")]
    missing = parse(profile('["{python}", "nope.py"]'), "q.toml", "q", profile_dir=tmp_path)
    with pytest.raises(UserError, match=r"script 'nope\.py' not found"):
        campaign.preflight([missing], 0, False)
    assert campaign.preflight([missing], 0, True).warnings == ()


def test_python_of_another_framework_brings_its_library_path(
        tmp_path: Path, profile: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dltop.runners.command import launch

    config = tmp_path / "config.toml"
    config.write_text(f'[frameworks.torch]\npython = "{sys.executable}"\n'
                      'ld_library_path = "/opt/torch-libs"\n')
    monkeypatch.setenv("DLTOP_CONFIG", str(config))
    monkeypatch.delenv("DLTOP_PYTHON_TORCH", raising=False)
    (job,) = parse(profile('["{python:torch}", "-c", "pass"]'), "p.toml", "p",
                   profile_dir=tmp_path).jobs
    go = launch(job)
    assert go.executable == sys.executable
    assert dict(go.env)["LD_LIBRARY_PATH"].startswith("/opt/torch-libs")
    (job,) = parse(profile('["{python}", "missing.py"]'), "p.toml", "p",
                   profile_dir=tmp_path).jobs
    with pytest.raises(UserError, match=r"script .missing\.py. not found in"):
        launch(job)


def test_a_preset_gives_defaults_under_the_entrys_keys(
        profile_text: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dltop.profiles import presets

    monkeypatch.setattr(presets, "PRESETS", {"demo": {
        "iteration_regex": "took (?P<ms>[0-9.]+)", "cumulative": True, "warmup": 3,
        "steps_per_match": 10}})
    keys = {"frameworks": ["command"], "models": ["m"], "batch_sizes": [8],
            "devices": ["cpu:1"], "command": ["prog"], "preset": "demo"}
    (job,) = parse(profile_text({**keys, "cumulative": False}), "p.toml", "p").jobs
    opts = dict(job.options)
    assert job.warmup == 3 and "cumulative" not in opts and opts["steps_per_match"] == 10
    assert opts["iteration_regex"] == "took (?P<ms>[0-9.]+)" and opts["timing"] == "regex"
    (job,) = parse(profile_text({**keys, "warmup": 0}), "p.toml", "p").jobs
    assert job.warmup == 0 and dict(job.options)["cumulative"] is True
    (job,) = parse(profile_text(keys, defaults={"warmup": 7}), "p.toml", "p").jobs
    assert job.warmup == 7  # [defaults] is the user's too: it wins over the preset


def test_command_keys_need_the_command_framework(profile: Any) -> None:
    text = profile('["python"]', framework="torch")
    with pytest.raises(UserError, match="only valid with frameworks"):
        parse(text, "p.toml", "p")
