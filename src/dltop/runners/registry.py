"""Parent side of the runners: which interpreter runs which framework's script.

Each framework may live in its own interpreter (TensorFlow and PyTorch pin
different CUDA stacks; CNTK 2.7 needs Python <= 3.7). The child scripts under
``child/`` are standard-library plus their framework, valid Python 3.6 (the ``openai``
client, ``openai_runner.py``, runs in dltop's own interpreter with aiohttp).

The interpreter for a framework, first match wins:

1. ``$DLTOP_PYTHON_<FRAMEWORK>`` (e.g. ``DLTOP_PYTHON_CNTK``);
2. ``[frameworks.<name>] python`` in the config file (:mod:`dltop.config`);
3. for CNTK, the environment ``dltop env setup cntk`` built;
4. dltop's own interpreter.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dltop.catalog import CAPABILITIES
from dltop.childfiles import CHILD_DIR
from dltop.config import config_path, load_frameworks
from dltop.errors import UserError
from dltop.paths import library_path_with
from dltop.pyexec import ask_python

MODULES = {name: f.module for name, f in CAPABILITIES.items() if f.module}
"""The module each framework's runner imports (:class:`dltop.catalog.Framework`: the
command runner needs none; the ``openai`` client is aiohttp, in dltop's own interpreter)."""
INSTALL_HINT = {name: f.install for name, f in CAPABILITIES.items() if f.install}


@dataclass(frozen=True)
class RunnerCommand:
    """How to start one framework's runner: interpreter, script, extra environment."""

    framework: str
    python: str
    script: Path
    env: tuple[tuple[str, str], ...] = field(default=())
    source: str = "this interpreter"
    """Where the interpreter choice came from (shown by ``dltop doctor``)."""

    def argv(self, spec_path: Path) -> list[str]:
        """The child's argv for a job spec file (no shell)."""
        return [self.python, str(self.script), str(spec_path)]


def _with_library_path(path: str) -> tuple[tuple[str, str], ...]:
    return (("LD_LIBRARY_PATH", library_path_with(path, os.environ)),)


def interpreter(framework: str) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(python, where that choice came from, extra environment) for ``framework``.

    Raises:
        UserError: the config file is invalid, or CNTK has no environment yet.
    """
    var = f"DLTOP_PYTHON_{framework.upper()}"
    if os.environ.get(var):
        return os.environ[var], f"${var}", ()
    conf = load_frameworks().get(framework)
    if conf is not None and conf.python:
        env = _with_library_path(conf.ld_library_path) if conf.ld_library_path else ()
        return conf.python, f"{config_path()} [frameworks.{framework}]", env
    if framework == "cntk":
        from dltop.envsetup import default_prefix, load_cntk_env

        built = load_cntk_env(default_prefix())
        if built is None:
            raise UserError(
                "CNTK runs in its own Python 3.6 environment, and none is built: run "
                f"'dltop env setup cntk' (or set [frameworks.cntk] python in {config_path()})")
        return (built.python, f"CNTK environment {default_prefix()}",
                _with_library_path(built.ld_library_path))
    return sys.executable, "this interpreter", ()


@functools.lru_cache(maxsize=32)
def _probe(python: str, module: str | None, env: tuple[tuple[str, str], ...]) -> str | None:
    """None if ``python`` is a Python that can find ``module``, else what is wrong."""
    code = ("import sys, importlib.util\n"
            "m = sys.argv[1]\n"
            "print('dltop-probe-ok')\n"
            "sys.exit(0 if not m or importlib.util.find_spec(m) else 5)")
    r = ask_python(python, code, module or "", env=dict(env))
    if r.exit_code is None:
        return f"cannot run {python}: {r.err}"
    if r.exit_code == 5:
        return f"{module} is not installed in {python}"
    if not r.ok or r.out != "dltop-probe-ok":
        return f"{python} is not a working Python interpreter"
    return None


def resolve(framework: str, check_module: bool = True) -> RunnerCommand:
    """The runner command for ``framework``, checked to be startable.

    Raises:
        UserError: no runner exists for the framework, its interpreter is missing
            or not a Python, or the framework is not installed in it.
    """
    script = CAPABILITIES[framework].script if framework in CAPABILITIES else None
    if script is None or not (CHILD_DIR / script).is_file():
        have = sorted(k for k, v in CAPABILITIES.items() if (CHILD_DIR / v.script).is_file())
        raise UserError(f"no runner for framework {framework!r} (runners: {', '.join(have)})")
    python, source, env = interpreter(framework)
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise UserError(f"interpreter for {framework!r} ({source}) not found or not "
                        f"executable: {python}")
    problem = _probe(python, MODULES.get(framework) if check_module else None, env)
    if problem is not None:
        hint = INSTALL_HINT.get(framework)
        raise UserError(f"{framework} ({source}): {problem}" +
                        (f"; fix: {hint}" if hint else ""))
    return RunnerCommand(framework, python, CHILD_DIR / script, env, source)
