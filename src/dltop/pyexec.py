"""Run ``python -c CODE`` in another interpreter and keep what a caller parses.

dltop asks framework interpreters small questions (their version, whether a
module is installed, a framework's version) before it trusts them with a run.
Standard library only, so any layer may import it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class PythonAnswer:
    """What ``python -c`` gave back."""

    exit_code: int | None
    """The exit status; None when the interpreter could not be run at all."""
    out: str
    """The last non-empty line of stdout ('' when none)."""
    err: str
    """The last non-empty line of stderr, or why the interpreter could not run."""

    @property
    def ok(self) -> bool:
        """It ran and exited 0."""
        return self.exit_code == 0


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1].strip() if lines else ""


def ask_python(python: str, code: str, *args: str, env: Mapping[str, str] | None = None,
               timeout_s: float = 60.0) -> PythonAnswer:
    """Run ``python -c code args...`` (no shell) and return its last lines.

    Args:
        python: the interpreter's path.
        code: the program (keep it valid for the oldest interpreter asked: 3.6).
        args: its ``sys.argv[1:]``.
        env: variables set over this process's environment.
        timeout_s: how long it may take; past that it counts as not runnable.
    """
    try:
        r = subprocess.run([python, "-c", code, *args], capture_output=True, text=True,
                           errors="replace", timeout=timeout_s,
                           env={**os.environ, **(env or {})})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return PythonAnswer(None, "", str(exc))
    return PythonAnswer(r.returncode, _last_line(r.stdout), _last_line(r.stderr))
