"""The `tensorflow` and `cntk` markers: a missing framework fails, unless explicitly allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).parents[1] / "conftest.py"
INI = """[pytest]
markers =
    slow: x
    tensorflow: x
    cntk: x
addopts = --strict-markers -p no:cacheprovider -p hide_frameworks
"""
# Loaded by the inner pytest first: TensorFlow and the CNTK environment look absent.
HIDE = """
import os, sys
sys.modules["tensorflow"] = None  # importlib.util.find_spec now answers None
os.environ["DLTOP_CNTK_ENV"] = os.path.join(os.getcwd(), "no-cntk-env")
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makefile(".ini", pytest=INI)
    pytester.makepyfile(hide_frameworks=HIDE)
    pytester.makepyfile(test_inner="""
        import pytest

        @pytest.mark.tensorflow
        def test_needs_tf():
            pass

        @pytest.mark.cntk
        def test_needs_cntk():
            pass

        def test_plain():
            pass
    """)
    monkeypatch.delenv("DLTOP_ALLOW_MISSING", raising=False)
    return pytester


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_a_missing_framework_fails_with_how_to_install_it(inner: pytest.Pytester) -> None:
    res = inner.runpytest_subprocess("-rA")
    res.assert_outcomes(passed=1, errors=2)
    res.stdout.fnmatch_lines(["*needs tensorflow: TensorFlow is not importable*make venv*",
                              "*needs cntk: the CNTK environment is missing at*no-cntk-env*"
                              "dltop env setup cntk*"])


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_an_explicit_opt_out_skips_only_the_named_framework(
        inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_ALLOW_MISSING", "cntk")
    res = inner.runpytest_subprocess("-rA")
    res.assert_outcomes(passed=1, errors=1, skipped=1)
    res.stdout.fnmatch_lines(["*SKIPPED*CNTK environment is missing*DLTOP_ALLOW_MISSING allows*"])
    monkeypatch.setenv("DLTOP_ALLOW_MISSING", "tensorflow, cntk")
    inner.runpytest_subprocess().assert_outcomes(passed=1, skipped=2)


@pytest.mark.slow  # spawns processes: over 1 s on a busy 2-core machine
def test_framework_markers_imply_slow(inner: pytest.Pytester) -> None:
    res = inner.runpytest_subprocess("-m", "not slow")
    res.assert_outcomes(passed=1, deselected=2)
