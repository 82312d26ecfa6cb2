"""Parent side of the runners: which interpreter runs which framework's script.

Each framework may live in its own interpreter (TensorFlow and PyTorch pin
different CUDA stacks; CNTK 2.7 needs Python <= 3.7). The child scripts under
``child/`` are standard-library plus their framework, valid Python 3.6.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dltop.errors import UserError

CHILD_DIR = Path(__file__).resolve().parent / "child"

_SCRIPTS = {
    "torch": "torch_runner.py",
    "tensorflow": "tf_runner.py",
    "cntk": "cntk_runner.py",
    "command": "command_runner.py",
}


@dataclass(frozen=True)
class RunnerCommand:
    """How to start one framework's runner: interpreter, script, extra environment."""

    framework: str
    python: str
    script: Path
    env: tuple[tuple[str, str], ...] = field(default=())

    def argv(self, spec_path: Path) -> list[str]:
        """The child's argv for a job spec file (no shell)."""
        return [self.python, str(self.script), str(spec_path)]


def python_for(framework: str) -> str:
    """Interpreter for ``framework``: ``$DLTOP_PYTHON_<FRAMEWORK>`` or this interpreter."""
    env = os.environ.get(f"DLTOP_PYTHON_{framework.upper()}")
    return env or sys.executable


def resolve(framework: str) -> RunnerCommand:
    """The runner command for ``framework``.

    Raises:
        UserError: no runner exists for the framework, or its interpreter is missing.
    """
    script = _SCRIPTS.get(framework)
    if script is None or not (CHILD_DIR / script).is_file():
        have = sorted(k for k, v in _SCRIPTS.items() if (CHILD_DIR / v).is_file())
        raise UserError(f"no runner for framework {framework!r} (runners: {', '.join(have)})")
    python = python_for(framework)
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise UserError(f"interpreter for {framework!r} not found or not executable: {python}")
    return RunnerCommand(framework, python, CHILD_DIR / script)
