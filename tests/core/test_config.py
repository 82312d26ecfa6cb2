"""Interpreters per framework: environment variable, config file, CNTK env; clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dltop.config import config_path, load_frameworks
from dltop.errors import UserError
from dltop.paths import library_path_with
from dltop.pyexec import ask_python
from dltop.runners import registry

PY36 = "/root/.pyenv/versions/3.6.15/bin/python3.6"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for fw in ("TORCH", "TENSORFLOW", "CNTK", "COMMAND"):
        monkeypatch.delenv(f"DLTOP_PYTHON_{fw}", raising=False)
    conf = tmp_path / "config.toml"
    monkeypatch.setenv("DLTOP_CONFIG", str(conf))
    registry._probe.cache_clear()
    return conf


def test_no_file_means_this_interpreter(clean_env: Path) -> None:
    assert load_frameworks() == {}
    cmd = registry.resolve("torch")
    assert cmd.python == sys.executable and cmd.source == "this interpreter"


@pytest.mark.parametrize(("text", "expected"), [
    ("[frameworks.torch\n", "not valid TOML"),
    ("[frameworks.caffe]\npython = 'x'\n", "frameworks.caffe: unknown framework"),
    ("[frameworks.torch]\npyhton = 'x'\n", "frameworks.torch.pyhton: unknown key"),
    ("[frameworks.torch]\npython = 3\n", "frameworks.torch.python: expected a non-empty string"),
    ("[other]\n", "unknown table or key 'other'"),
])
def test_bad_config_names_file_and_key(clean_env: Path, text: str, expected: str) -> None:
    clean_env.write_text(text)
    with pytest.raises(UserError, match=expected) as err:
        registry.resolve("torch")
    assert str(clean_env) in str(err.value)


def test_config_interpreter_must_exist_and_be_python(clean_env: Path) -> None:
    clean_env.write_text("[frameworks.torch]\npython = '/nonexistent/python'\n")
    with pytest.raises(UserError, match="not found or not executable: /nonexistent/python"):
        registry.resolve("torch")
    clean_env.write_text("[frameworks.torch]\npython = '/bin/sh'\n")
    with pytest.raises(UserError, match="/bin/sh is not a working Python interpreter") as err:
        registry.resolve("torch")
    assert "[frameworks.torch]" in str(err.value)


def test_framework_missing_from_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_PYTHON_TENSORFLOW", PY36)  # a real Python without TensorFlow
    with pytest.raises(UserError, match=r"tensorflow \(\$DLTOP_PYTHON_TENSORFLOW\): "
                                        "tensorflow is not installed in .*3.6"):
        registry.resolve("tensorflow")


def test_env_var_beats_config_and_config_beats_default(clean_env: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env.write_text(f"[frameworks.command]\npython = '{PY36}'\n"
                         "ld_library_path = '/opt/x/lib'\n")
    cmd = registry.resolve("command")
    assert cmd.python == PY36 and "[frameworks.command]" in cmd.source
    assert dict(cmd.env)["LD_LIBRARY_PATH"].startswith("/opt/x/lib")
    monkeypatch.setenv("DLTOP_PYTHON_COMMAND", sys.executable)
    assert registry.resolve("command").source == "$DLTOP_PYTHON_COMMAND"


def test_cntk_without_an_environment_says_how_to_build_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DLTOP_CNTK_ENV", str(tmp_path / "none"))
    with pytest.raises(UserError, match="dltop env setup cntk"):
        registry.resolve("cntk")


def test_profile_with_a_missing_framework_is_refused_before_anything_is_stored(
        tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text('[[matrix]]\nframeworks = ["tensorflow"]\nmodels = ["fcn-r"]\n'
                    'batch_sizes = [8]\ndevices = ["cpu:1"]\n')
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db)],
                         capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "DLTOP_PYTHON_TENSORFLOW": PY36,
                              "DLTOP_CONFIG": str(tmp_path / "c.toml"), "HOME": str(tmp_path)})
    assert res.returncode == 2, res.stderr
    assert "tensorflow is not installed in" in res.stderr and "Traceback" not in res.stderr
    assert not db.exists()


@pytest.mark.cntk
def test_cntk_multi_worker_without_mpiexec_is_refused(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DLTOP_CONFIG")  # the real CNTK environment, wherever it was built
    prof = tmp_path / "p.toml"
    prof.write_text('[[matrix]]\nframeworks = ["cntk"]\nmodels = ["fcn-r"]\n'
                    'batch_sizes = [8]\ndevices = ["cpus:2"]\n')
    bindir = tmp_path / "bin"
    bindir.mkdir()
    db = tmp_path / "d.db"
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db)],
                         capture_output=True, text=True,
                         env={"PATH": str(bindir),
                              "DLTOP_PYTHON_CNTK": registry.interpreter("cntk")[0],
                              "DLTOP_CONFIG": str(tmp_path / "c.toml"), "HOME": str(tmp_path)})
    assert res.returncode == 2, res.stderr
    assert "cpus:2 with CNTK needs mpiexec" in res.stderr and not db.exists()


def test_config_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DLTOP_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == tmp_path / "dltop" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config_path() == tmp_path / "home" / ".config" / "dltop" / "config.toml"


def test_library_path_goes_first() -> None:
    assert library_path_with("/x/lib", {"LD_LIBRARY_PATH": "/a:/b"}) == "/x/lib:/a:/b"
    assert library_path_with("/x/lib", {"LD_LIBRARY_PATH": ""}) == "/x/lib"
    assert library_path_with("/x/lib", {}) == "/x/lib"


def test_ask_python_keeps_the_last_lines_and_names_what_failed(tmp_path: Path) -> None:
    code = "import os, sys; print('a'); print(os.environ['V'] + sys.argv[1])"
    answer = ask_python(sys.executable, code, "!", env={"V": "b"})
    assert (answer.ok, answer.out) == (True, "b!")
    failed = ask_python(sys.executable, "import no_such_module_here")
    assert failed.exit_code == 1 and "no_such_module_here" in failed.err and not failed.ok
    missing = ask_python(str(tmp_path / "python"), "pass")
    assert missing.exit_code is None and "python" in missing.err
