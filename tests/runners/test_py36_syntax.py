"""Child-side files must stay valid Python 3.6 (CNTK 2.7's interpreter runs them)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from dltop import envsetup
from dltop.runners.registry import CHILD_DIR

FILES = sorted(CHILD_DIR.rglob("*.py"))


def test_there_are_child_files() -> None:
    assert {"dltop_protocol.py", "torch_runner.py"} <= {f.name for f in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_parses_as_python_36(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 6))
    for node in ast.walk(tree):
        assert not isinstance(node, ast.NamedExpr), f"{path.name}: walrus"
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            assert all(a.name != "annotations" for a in node.names), path.name
        assert not (isinstance(node, ast.ImportFrom) and node.module == "dataclasses")


@pytest.mark.cntk
def test_compiles_with_a_real_python_36(tmp_path: Path) -> None:
    env = envsetup.load_cntk_env(envsetup.default_prefix())
    assert env is not None  # the `cntk` marker has checked it
    for path in FILES:  # with the interpreter that runs them under CNTK
        res = subprocess.run([env.python, "-c", "import sys; compile(open(sys.argv[1]).read(), "
                              "sys.argv[1], 'exec')", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
