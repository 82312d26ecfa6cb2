"""The profile side of the time windows (issue 30): ``min_time_s`` and ``warmup_s``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.profiles import window
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.results.idread import identity_of

ENTRY = """
[[matrix]]
frameworks = ["{fw}"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["{dev}"]
{extra}
"""


def jobs(extra: str = "", fw: str = "torch", dev: str = "cpu:1") -> tuple[JobSpec, ...]:
    return parse(ENTRY.format(fw=fw, dev=dev, extra=extra), "w.toml", "w", 4).jobs


def err(extra: str, fw: str = "torch", dev: str = "cpu:1") -> str:
    with pytest.raises(UserError) as info:
        jobs(extra, fw, dev)
    return str(info.value)


def test_the_product_default_applies_where_the_profile_sets_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(window.DEFAULT_ENV)
    (job,) = jobs()
    assert job.min_time_s == window.DEFAULT_MIN_TIME_S == 6.0 and job.warmup_s == 0.0
    # the runner's spec carries it
    assert job.to_json_dict()["min_time_s"] == 6.0
    monkeypatch.setenv(window.DEFAULT_ENV, "1.5")
    assert jobs()[0].min_time_s == 1.5
    monkeypatch.setenv(window.DEFAULT_ENV, "soon")
    with pytest.raises(UserError, match="DLTOP_DEFAULT_MIN_TIME_S='soon'"):
        jobs()


def test_a_swept_window_makes_configurations() -> None:
    a, b = jobs("min_time_s = [0.5, 2]\nwarmup_s = 1")
    assert (a.min_time_s, b.min_time_s, a.warmup_s) == (0.5, 2.0, 1.0)
    assert a.config_key != b.config_key


@pytest.mark.parametrize(("extra", "expected"), [
    ("min_time_s = -1", "matrix[0].min_time_s: expected a finite number of seconds >= 0"),
    ('min_time_s = "2s"', "matrix[0].min_time_s: expected a number of seconds >= 0"),
    ("warmup_s = nan", "matrix[0].warmup_s: expected a finite number of seconds >= 0"),
    ("min_time_s = true", "matrix[0].min_time_s: expected a number of seconds"),
    ("min_time_s = 60\ntimeout_s = 30", "matrix[0].min_time_s: min_time_s + warmup_s = 60 s "
     "is not below timeout_s = 30 s"),
    ("warmup_s = 20\nmin_time_s = 0\ntimeout_s = 20", "matrix[0].warmup_s: "),
])
def test_bad_windows_name_the_file_and_key(extra: str, expected: str) -> None:
    msg = err(extra)
    assert msg.startswith("w.toml: ") and expected in msg, msg


def test_a_default_that_does_not_fit_the_timeout_says_it_is_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(window.DEFAULT_ENV)
    assert "(min_time_s is the default 6)" in err("timeout_s = 5")


def test_where_a_window_cannot_apply_it_is_refused_or_left_at_zero(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(window.DEFAULT_ENV)
    assert "does not apply here: CNTK ranks" in err("min_time_s = 1", "cntk", "cpus:2")
    assert jobs(fw="cntk", dev="cpus:2")[0].min_time_s == 0.0  # default: counts only
    assert jobs(fw="cntk", dev="cpu:2")[0].min_time_s == 6.0  # one process: it applies
    epochs = f'data = "real"\ndata_dir = "{tmp_path}"\nepochs = 2\n'
    assert "an epochs run's length" in err(epochs + "warmup_s = 1")
    assert jobs(epochs)[0].min_time_s == 0.0
    cmd = f'command = ["{sys.executable}", "-c", "pass"]\n'
    (job,) = parse(ENTRY.format(fw="command", dev="cpu:1", extra=cmd), "w.toml", "w", 4).jobs
    assert job.min_time_s == 0.0
    with pytest.raises(UserError, match=r"matrix\[0\].min_time_s: .*command"):
        parse(ENTRY.format(fw="command", dev="cpu:1", extra=cmd + "min_time_s = 2"),
              "w.toml", "w", 4)


def test_a_zero_window_leaves_identities_as_before() -> None:
    (job,) = jobs("min_time_s = 0")
    spec = job.to_json_dict()
    assert "min_time_s" not in identity_of(json.dumps(spec), None)
    old = {k: v for k, v in spec.items() if k not in window.KEYS}  # stored before issue 30
    assert identity_of(json.dumps(old), None) == identity_of(json.dumps(spec), None)
    (timed,) = jobs("min_time_s = 3")
    assert identity_of(json.dumps(timed.to_json_dict()), None)["min_time_s"] == 3.0


def test_run_refuses_a_bad_window_before_touching_the_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(ENTRY.format(fw="torch", dev="cpu:1", extra="min_time_s = -0.5"))
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(bad), "--db", str(db)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DLTOP_DB": str(db)})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "bad.toml: matrix[0].min_time_s: expected a finite number" in res.stderr
    assert not db.exists()


def test_profiles_show_states_the_window(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    from dltop.cli import main

    prof = tmp_path / "p.toml"
    prof.write_text(ENTRY.format(fw="torch", dev="cpu:1", extra="min_time_s = [0, 2.5]\n"
                                 "warmup_s = 1"))
    assert main(["profiles", "show", str(prof)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "min_time_s" in lines[2]
    assert " - " in lines[3] and ">= 2.5" in lines[4] and "warmup_s=1.0" in lines[4]
    assert lines[5].startswith("# measured window: iters iterations, then more until")
    prof.write_text(ENTRY.format(fw="torch", dev="cpu:1", extra="min_time_s = 0"))
    assert main(["profiles", "show", str(prof)]) == 0
    assert "# measured window" not in capsys.readouterr().out  # counts only: nothing to say
