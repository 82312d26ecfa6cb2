"""The runners' stdlib modules (``runners/child/NAME.py``) loaded by the parent from their
files: one table or rule serves both sides of the protocol (the shapes of lm_catalog,
lm_text's checks, dltop_protocol's event depth). Import-light, stdlib only, and below
every layer: the profiles (below runners/) read the shapes through it too."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

CHILD_DIR = Path(__file__).resolve().parent / "runners" / "child"
"""The child scripts' folder (stdlib + framework, valid Python 3.6)."""


@functools.cache
def child_module(name: str) -> ModuleType:
    """``runners/child/NAME.py`` as a module, loaded once (not as a package import: the
    child files import each other by plain name, on their own sys.path)."""
    path = CHILD_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"dltop_child_{name}", path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file ships with dltop
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
