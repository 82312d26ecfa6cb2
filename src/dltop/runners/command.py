"""Parent side of the ``command`` framework: the user's program, resolved for one job.

Preflight, ``dltop profiles show`` and the engine (when the run starts) call
:func:`launch`: it fills in the job's placeholders (``{batch}``, ``{total}``,
``{python}``, ``{python:FRAMEWORK}``, ...), finds the program (a path with a
``/`` relative to ``cwd``; a bare name on ``PATH``) and gathers the environment
the program gets on top of the runner's: the ``env`` table, and the library
path of a framework whose interpreter a ``{python:FRAMEWORK}`` chose (CNTK's).
A bare ``python``/``python3`` as the program is taken to mean dltop's
interpreter for command jobs (``{python}``) rather than whichever Python is
first on ``PATH``; the launch says so in a note.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dltop.errors import UserError
from dltop.profiles.command import fill
from dltop.profiles.jobspec import JobSpec
from dltop.runners import registry

_BARE_PYTHON = re.compile(r"python[0-9.]*")


@dataclass(frozen=True)
class Launch:
    """The program of one command job, ready to start."""

    argv: tuple[str, ...]
    """The command with every placeholder filled in, as the program sees it."""
    executable: str
    """The file that runs (argv[0] resolved)."""
    cwd: str
    env: tuple[tuple[str, str], ...]
    """Set for the program on top of the runner's environment."""
    notes: tuple[str, ...] = ()

    def to_spec(self) -> dict[str, Any]:
        """The ``command_launch`` entry of the runner's spec.json."""
        return {"command_launch": {"argv": list(self.argv), "executable": self.executable,
                                   "cwd": self.cwd, "env": dict(self.env),
                                   "notes": list(self.notes)}}


def launch(job: JobSpec) -> Launch:
    """Resolve ``job``'s program (a ``command`` job).

    Raises:
        UserError: an interpreter named by a placeholder cannot be resolved, or the
            program (or the script given to a Python) is not found.
    """
    opts = dict(job.options)
    cwd = str(opts.get("cwd") or os.getcwd())
    values = {"batch": str(job.batch_size), "threads": str(job.device.count),
              "device": job.device.label, "iterations": str(job.iterations),
              "warmup": str(job.warmup), "total": str(job.warmup + job.iterations),
              "profile_dir": cwd}
    lib_env: dict[str, str] = {}
    pythons: list[str] = []

    def value(name: str, arg: str | None) -> str:
        if name != "python":
            return values[name]
        python = _python(arg or "command", lib_env)
        pythons.append(python)
        return python

    try:
        argv = [fill(a, value) for a in opts["command"]]
        user_env = {k: fill(v, value) for k, v in opts.get("env", ())}
    except (KeyError, ValueError) as exc:  # the loader checked them: a stored spec changed
        raise UserError(f"command: {exc}") from None
    notes = []
    python_program = bool(pythons) and argv[0] in pythons
    if "/" not in argv[0] and _BARE_PYTHON.fullmatch(argv[0]):
        python = _python("command", lib_env)
        notes.append(f"{argv[0]!r} runs dltop's interpreter for command jobs, {python} (write "
                     "{python} to say so, or a path for another Python)")
        argv[0], python_program = python, True
    env = {**lib_env, **user_env}  # the profile's env table wins
    executable = _find(argv[0], cwd, env.get("PATH", os.environ.get("PATH", "")))
    script = argv[1] if len(argv) > 1 else ""
    if (python_program and script.endswith(".py") and not script.startswith("-")
            and not os.path.isfile(os.path.join(cwd, script))):
        raise UserError(f"command: script {script!r} not found in {cwd} (the command's "
                        "working directory: set cwd, or give a path)")
    return Launch(tuple(argv), executable, cwd, tuple(sorted(env.items())), tuple(notes))


def _python(framework: str, lib_env: dict[str, str]) -> str:
    """The interpreter for ``framework``'s jobs; its library path goes into ``lib_env``."""
    if framework == "command":
        python, source, env = registry.interpreter(framework)
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise UserError(f"{{python}} ({source}): not an executable file: {python}")
    else:
        cmd = registry.resolve(framework)
        python, env = cmd.python, cmd.env
    lib_env.update(dict(env))
    return python


def _find(program: str, cwd: str, path: str) -> str:
    """``program`` as an absolute executable path, the way the runner will find it."""
    if "/" in program:
        found = os.path.join(cwd, os.path.expanduser(program))
        if os.path.isfile(found) and os.access(found, os.X_OK):
            return os.path.abspath(found)
        raise UserError(f"command {program!r} not found (no executable file {found})")
    which = shutil.which(program, path=path)
    if which is None:
        raise UserError(f"command {program!r} not found (not on PATH, not an executable "
                        f"file; a program in {cwd} is written ./{program})")
    return os.path.abspath(which)


def spec_extra(job: JobSpec) -> Mapping[str, Any]:
    """What the runner's spec.json carries beyond the job: the launch of a command job."""
    return launch(job).to_spec() if job.framework == "command" else {}
