"""dltop.envsetup: finding Python 3.6, Open MPI checks, env.json, and a real CNTK build."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dltop import envsetup
from dltop.errors import UserError


def test_a_missing_python_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=re.escape("/nonexistent/python3.6")):
        envsetup.find_python36("/nonexistent/python3.6")
    with pytest.raises(UserError, match=re.escape("/nonexistent/python3.6")):
        envsetup.setup_cntk(tmp_path / "env", "/nonexistent/python3.6", log=lambda _s: None)
    assert not (tmp_path / "env" / "env.json").exists()


def test_a_python_of_another_version_is_refused() -> None:
    with pytest.raises(UserError, match=r"Python 3\.6 or 3\.7"):
        envsetup.find_python36(sys.executable)


def test_nothing_found_names_every_place(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    monkeypatch.setattr(envsetup, "DEFAULT_PY36", str(tmp_path / "no-python3.6"))
    monkeypatch.setattr(envsetup, "_pyenv_candidates", list)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError) as err:
        envsetup.find_python36()
    for place in ("no-python3.6", "pyenv root", "python3.6/python3.7 on PATH"):
        assert place in str(err.value)


def test_load_cntk_env(tmp_path: Path) -> None:
    assert envsetup.load_cntk_env(tmp_path) is None
    (tmp_path / "env.json").write_text("{not json")
    assert envsetup.load_cntk_env(tmp_path) is None
    data = {"python": sys.executable, "ld_library_path": "/x/lib", "cntk_version": "2.7"}
    (tmp_path / "env.json").write_text(json.dumps(data))
    env = envsetup.load_cntk_env(tmp_path)
    assert env == envsetup.CntkEnv(sys.executable, "/x/lib", "2.7")
    assert env.child_env({"LD_LIBRARY_PATH": "/a"})["LD_LIBRARY_PATH"] == "/x/lib:/a"
    assert env.child_env({})["LD_LIBRARY_PATH"] == "/x/lib"
    (tmp_path / "env.json").write_text(json.dumps({**data, "python": "/gone/python"}))
    assert envsetup.load_cntk_env(tmp_path) is None


def test_default_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DLTOP_CNTK_ENV", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert envsetup.default_prefix() == tmp_path / "dltop" / "envs" / "cntk"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert envsetup.default_prefix() == Path.home() / ".local/share/dltop/envs/cntk"
    monkeypatch.setenv("DLTOP_CNTK_ENV", str(tmp_path / "mine"))
    assert envsetup.default_prefix() == tmp_path / "mine"


def test_missing_open_mpi_without_root_names_the_apt_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envsetup, "_system_libs", dict)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="apt-get install -y libopenmpi3 openmpi-bin"):
        envsetup._ensure_mpi(lambda _s: None)


def test_script_entry_reports_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert envsetup.main(["cntk", "--python", "/nonexistent/python3.6",
                          "--prefix", "/tmp/unused"]) == 2
    assert "/nonexistent/python3.6" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.cntk
def test_builds_and_reuses_a_working_environment() -> None:
    """Build (or reuse) the real environment at $DLTOP_CNTK_ENV or the default prefix."""
    prefix = envsetup.default_prefix()
    lines: list[str] = []
    env = envsetup.setup_cntk(prefix, log=lines.append)
    assert env.cntk_version == "2.7"
    assert envsetup.load_cntk_env(prefix) == env
    for name in ("libmpi.so.12", "libmpi_cxx.so.1"):
        assert (Path(env.ld_library_path) / name).resolve().is_file()
    again: list[str] = []
    assert envsetup.setup_cntk(prefix, log=again.append) == env
    assert len(again) == 1 and "ready" in again[0]  # nothing rebuilt the second time
    res = subprocess.run([env.python, "-c", "import cntk, numpy; print(cntk.__version__)"],
                         env=env.child_env(os.environ), capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip().endswith("2.7"), res.stderr
