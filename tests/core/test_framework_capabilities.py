"""What a framework can do is declared once (issue 39 item 4): ``catalog.CAPABILITIES``.

No module outside ``runners/`` compares a framework with a framework's name (the scan
below, like tests/store/test_sql_owner.py's), and a refusal follows the table: the
same profile is refused or loaded as the table says, not as a name test says.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import dltop
from dltop import catalog
from dltop.errors import UserError
from dltop.profiles.loader import parse

SRC = Path(dltop.__file__).parent
FP8_PROFILE = """
[[matrix]]
frameworks = ["{fw}"]
models = ["gpt2-small"]
batch_sizes = [8]
devices = ["gpu:1"]
precision = "fp8"
"""


def _names(node: ast.expr) -> set[str]:
    """The framework names a literal (or a tuple, list or set of literals) holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & set(catalog.FRAMEWORKS)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_names(e) for e in node.elts))
    return set()


def _is_framework(node: ast.expr) -> bool:
    """``framework``, ``fw`` or ``x.framework`` (a job's framework), ``frameworks`` or
    ``x.get("frameworks")`` (an entry's)."""
    if isinstance(node, ast.Name):
        return node.id in ("framework", "fw", "frameworks")
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        return node.args[0].value == "frameworks"
    return isinstance(node, ast.Attribute) and node.attr == "framework"


def branches(source: str) -> list[str]:
    """Each comparison of a framework with a framework's name in ``source``."""
    return [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Compare)
            and any(map(_is_framework, sides := [node.left, *node.comparators]))
            and any(_names(s) for s in sides)]


def test_no_framework_name_branch_outside_the_runners() -> None:
    found = [f"{path.relative_to(SRC)}:{hit}" for path in sorted(SRC.rglob("*.py"))
             if "runners" not in path.relative_to(SRC).parts
             for hit in branches(path.read_text())]
    assert found == []


def test_the_scan_finds_a_branch() -> None:
    """The scan is not blind: branches like the ones the table replaced are found."""
    assert len(branches('if job.framework == "cntk" or fw in ("torch", "jax"):\n'
                        '    if framework != "x" and job.framework in frameworks:\n'
                        '        pass\n')) == 2
    # an entry's list: what the loader's key groups replaced (issue 39 item 4)
    assert len(branches('if "command" not in frameworks or frameworks != ["command"]:\n'
                        '    ok = m.get("frameworks") == ["openai"]\n')) == 3


def test_the_fp8_refusal_follows_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(fw: str) -> str | None:
        try:
            parse(FP8_PROFILE.format(fw=fw), "f8.toml", "f8")
        except UserError as exc:
            return str(exc)
        return None

    assert "JAX's fp8 (jax.numpy.float8 dot products) is not built" in str(load("jax"))
    assert load("torch") is None
    caps = catalog.CAPABILITIES
    # JAX given fp8 in the table loads; PyTorch without it is refused, by the generic reason
    monkeypatch.setitem(caps, "jax", dataclasses.replace(caps["jax"],
                                                         precisions=catalog.PRECISIONS))
    monkeypatch.setitem(caps, "torch", dataclasses.replace(
        caps["torch"], precisions=catalog.PRECISIONS[:-1]))
    assert load("jax") is None
    assert load("torch") == ('f8.toml: matrix[0].precision: precision = "fp8" runs in '
                             "PyTorch only (torchao float8 training); torch has no fp8 "
                             "training path (docs/profiles.md)")


def test_every_framework_has_its_runner() -> None:
    from dltop.childfiles import CHILD_DIR

    for name, can in catalog.CAPABILITIES.items():
        assert (CHILD_DIR / can.script).is_file(), name
        assert set(can.modes) <= set(catalog.MODES) and set(can.precisions) <= set(
            catalog.PRECISIONS) and set(can.optimizers) <= set(catalog.OPTIMIZERS), name
