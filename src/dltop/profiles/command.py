"""The ``command`` framework's profile keys: their checks and the placeholder grammar.

A ``[[matrix]]`` entry with ``frameworks = ["command"]`` runs the user's own
program (docs/profiles.md, "Your own program"). This module validates its keys
into the job's ``options`` and defines the placeholders its ``command``,
``cwd`` and ``env`` values may hold: ``{name}`` or ``{name:arg}``, with ``{{``
and ``}}`` for literal braces. ``{profile_dir}`` is filled in here; the rest
are per job and filled in when the run starts (:mod:`dltop.runners.command`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from dltop.errors import UserError
from dltop.profiles.limits import MAX_STEPS_PER_MATCH

KEYS: Final = ("command", "preset", "iteration_regex", "timing", "cumulative",
               "steps_per_match", "cwd", "env")
"""The keys of a command entry (besides the settings every entry has)."""
TIMINGS: Final = ("regex", "line-gap", "helper")
TIMING_GROUPS: Final = ("seconds", "ms", "us", "samples_per_s", "it_per_s", "total_seconds")
"""Regex groups that carry a step's time: durations and rates (samples/s, steps/s) per
step, and ``total_seconds``, the time of all the steps a line covers."""
STEP_GROUPS: Final = ("count", "step")
"""``count``: steps the line summarises; ``step``: the program's running step number."""
PLACEHOLDERS: Final = ("batch", "threads", "device", "iterations", "warmup", "total",
                       "profile_dir", "python")
PYTHON_FRAMEWORKS: Final = ("torch", "tensorflow", "cntk", "jax", "command")
"""``{python:NAME}``: the interpreter dltop runs that framework's jobs with."""

Piece = str | tuple[str, str | None]
Err = Callable[[str, str], UserError]

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def known() -> str:
    """The placeholders, as an error message lists them."""
    names = [f"{{{n}}}" for n in PLACEHOLDERS]
    return ", ".join([*names, "{python:FRAMEWORK}"])


def parse_template(text: str) -> list[Piece]:
    """Literal text and ``(name, arg)`` placeholders of ``text``, in order.

    Raises:
        ValueError: an unknown placeholder or a lone brace (the message says which).
    """
    out: list[Piece] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        out.append(text[pos:m.start()])
        pos = m.end()
        token = m.group(0)
        if token in ("{{", "}}"):
            out.append(token[0])
            continue
        body = m.group(1)
        if body is None:
            raise ValueError(f"a lone {token!r} (write {token * 2} for a literal brace)")
        name, colon, arg = body.partition(":")
        if (name not in PLACEHOLDERS or (colon and name != "python")
                or (colon and arg not in PYTHON_FRAMEWORKS)):
            raise ValueError(f"unknown placeholder {{{body}}} (known: {known()}, FRAMEWORK "
                             f"one of {', '.join(PYTHON_FRAMEWORKS)}); write {{{{ and }}}} "
                             "for literal braces")
        out.append((name, arg if colon else None))
    out.append(text[pos:])
    return [p for p in out if p != ""]


def fill(text: str, value: Callable[[str, str | None], str | None],
         partial: bool = False) -> str:
    """``text`` with each placeholder replaced by ``value(name, arg)``.

    ``partial``: the result is still a template, to be filled again later: a
    placeholder whose value is None stays as written, and braces in the text
    and in the values are escaped. Otherwise every value must be known.
    """
    pieces = parse_template(text)
    values = [None if isinstance(p, str) else value(*p) for p in pieces]
    template = partial

    def esc(s: str) -> str:
        return s.replace("{", "{{").replace("}", "}}") if template else s

    out = []
    for p, v in zip(pieces, values, strict=True):
        if isinstance(p, str):
            out.append(esc(p))
        elif v is None:
            if not partial:
                raise ValueError(f"no value for placeholder {{{p[0]}}}")
            out.append("{" + p[0] + (f":{p[1]}" if p[1] is not None else "") + "}")
        else:
            out.append(esc(v))
    return "".join(out)


def options(err: Err, loc: Callable[[str], str], merged: Mapping[str, Any],
            profile_dir: Path) -> tuple[tuple[str, Any], ...]:
    """The job options of a command entry, checked.

    Args:
        err: builds the UserError for (key location, message).
        loc: a key's location for messages (``matrix[0].cwd``).
        merged: the entry's keys over [defaults] over its preset.
        profile_dir: the profile file's directory (``{profile_dir}``, default ``cwd``).
    """
    def at_dir(name: str, arg: str | None) -> str | None:
        return str(profile_dir) if name == "profile_dir" else None

    def template(key: str, text: str) -> str:
        try:
            return fill(text, at_dir, partial=True)
        except ValueError as exc:
            raise err(key, str(exc)) from None

    argv = merged.get("command")
    if (not isinstance(argv, list) or not argv
            or not all(isinstance(a, str) and a for a in argv)):
        raise err(loc("command"), "expected a non-empty list of strings (an argv, never a "
                  f"shell string), got {argv!r}")
    out: list[tuple[str, Any]] = [
        ("command", tuple(template(f"{loc('command')}[{i}]", a) for i, a in enumerate(argv))),
        ("cwd", _cwd(err, loc, merged.get("cwd"), profile_dir))]
    env = merged.get("env")
    if env is not None:
        if not isinstance(env, dict):
            raise err(loc("env"), f'expected a table of strings (env = {{ NAME = "value" }}), '
                      f"got {env!r}")
        for name, value in env.items():
            if not isinstance(value, str):
                raise err(f"{loc('env')}.{name}", f"expected a string, got {value!r} (quote "
                          "numbers: environment values are text)")
            if not name or "=" in name or "\0" in name:
                raise err(f"{loc('env')}.{name}", "not a valid environment variable name")
        out.append(("env", tuple(sorted((k, template(f"{loc('env')}.{k}", v))
                                        for k, v in env.items()))))
    out.extend(_timing(err, loc, merged))
    return tuple(out)


def _cwd(err: Err, loc: Callable[[str], str], value: Any, profile_dir: Path) -> str:
    if value is None:
        return str(profile_dir)
    if not isinstance(value, str) or not value:
        raise err(loc("cwd"), f"expected a directory path (a string), got {value!r}")
    try:
        pieces = parse_template(value)
    except ValueError as exc:
        raise err(loc("cwd"), str(exc)) from None
    if any(not isinstance(p, str) and p[0] != "profile_dir" for p in pieces):
        raise err(loc("cwd"), "only {profile_dir} may be used here")
    text = "".join(p if isinstance(p, str) else str(profile_dir) for p in pieces)
    path = profile_dir / Path(text).expanduser()
    if not path.is_dir():
        raise err(loc("cwd"), f"directory {path} does not exist")
    return str(path.resolve())


def _timing(err: Err, loc: Callable[[str], str], m: Mapping[str, Any]
            ) -> list[tuple[str, Any]]:
    regex = m.get("iteration_regex")
    groups: tuple[str, ...] = ()
    if regex is not None:
        if not isinstance(regex, str):
            raise err(loc("iteration_regex"), f"expected a string, got {regex!r}")
        try:
            groups = tuple(re.compile(regex).groupindex)
        except re.error as exc:
            raise err(loc("iteration_regex"), f"invalid regular expression: {exc}") from None
    timing = m.get("timing", "regex" if regex is not None else "helper")
    if timing not in TIMINGS:
        raise err(loc("timing"), f"unknown value {timing!r} (valid: {', '.join(TIMINGS)})")
    out: list[tuple[str, Any]] = [("timing", timing)]
    units = [g for g in TIMING_GROUPS if g in groups]
    named = ", ".join(f"(?P<{g}>...)" for g in TIMING_GROUPS)
    if timing != "helper":
        if regex is None:
            raise err(loc("timing"), f'timing = "{timing}" needs iteration_regex')
        if timing == "regex" and not units:
            raise err(loc("iteration_regex"), f"needs one named timing group: {named}; or "
                      'timing = "line-gap" when the program prints no time')
        if timing == "line-gap" and units:
            raise err(loc("iteration_regex"), f'timing = "line-gap" times the lines itself: '
                      f"remove the (?P<{units[0]}>...) group, or use timing = \"regex\"")
        if len(units) > 1:
            raise err(loc("iteration_regex"), "has more than one timing group ("
                      f"{', '.join(units)}); keep exactly one of {named}")
        if all(g in groups for g in STEP_GROUPS):
            raise err(loc("iteration_regex"), "has both a count and a step group; keep one")
    if regex is not None:  # stored as written, though timing = "helper" ignores it
        out.append(("iteration_regex", regex))
    cumulative = m.get("cumulative", False)
    if not isinstance(cumulative, bool):
        raise err(loc("cumulative"), f"expected true or false, got {cumulative!r}")
    if cumulative and timing != "regex":
        raise err(loc("cumulative"), 'a running mean needs timing = "regex"')
    if cumulative:
        out.append(("cumulative", True))
    steps = m.get("steps_per_match", 1)
    if isinstance(steps, bool) or not isinstance(steps, int) \
            or not 1 <= steps <= MAX_STEPS_PER_MATCH:
        raise err(loc("steps_per_match"), f"expected an integer >= 1 and <= "
                  f"{MAX_STEPS_PER_MATCH}, got {steps!r}")
    if steps != 1:
        if timing == "helper":
            raise err(loc("steps_per_match"), 'applies to output lines, not to timing = "helper"')
        if any(g in groups for g in STEP_GROUPS):
            raise err(loc("steps_per_match"), "the regex's count/step group already says "
                      "how many steps a line covers")
        out.append(("steps_per_match", steps))
    return out
