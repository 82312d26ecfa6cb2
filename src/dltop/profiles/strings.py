"""Profile strings that could break a line: refused at load (issue 27).

A profile's strings reach places where a line break is structure: a model label
is written into the comment line of a Slurm ``batch.sh`` (where
``lab\\n#SBATCH --dependency=...\\ntouch ...`` would become a directive and a
command), a ``[slurm]`` ``setup`` entry is one line of that script, names and
labels are table rows and log lines. So every string in a profile, key or value,
at any depth, is refused if it holds a line break (what :meth:`str.splitlines`
splits on: ``\\n``, ``\\r``, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, ``\\x85``,
``U+2028``, ``U+2029``) or a NUL (which no argument, path or environment value
can carry). The error names the key and exits 2, nothing stored.

Not refused: line breaks in ``description`` (free text, shown escaped, never in a
script) and in the values of ``command`` and ``env`` (a ``python -c`` program may
be several lines; both go to the runner as an argument vector and an environment
in the JSON spec, never through a shell). Other control characters (``ESC``)
stay allowed: every printer escapes them (:mod:`dltop.textsafe`), and so does the
one script line a label reaches (:func:`dltop.jobs.executors.slurm_script.batch_script`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dltop.errors import UserError

Err = Callable[[str, str], UserError]

BREAKS = re.compile("[\x00\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
"""A line break (:meth:`str.splitlines`) or a NUL."""
MULTILINE_OK = ("description", "command", "env")
"""Keys whose values may hold line breaks (never written into a script)."""


def check(err: Err, doc: dict[str, Any]) -> None:
    """Refuse a line break or NUL in any string of the parsed profile ``doc``.

    Args:
        err: makes the error for a key path (``matrix[0].models[1]``) and a message.
        doc: the TOML document as :mod:`tomllib` returns it.

    Raises:
        UserError: from ``err``, naming the first offending key and the character.
    """
    _walk(err, "", doc, multiline_ok=False)


def _walk(err: Err, path: str, value: Any, *, multiline_ok: bool) -> None:
    if isinstance(value, str):
        found = BREAKS.search(value)
        if found and (found.group() == "\x00" or not multiline_ok):
            raise err(path or "(top)", f"{_name(found.group())} in {_shown(value)}: a profile "
                      "string must be one line (it may reach a generated script or a "
                      "table row)")
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            found = BREAKS.search(str(key))
            if found:
                raise err(sub, f"{_name(found.group())} in a key name")
            _walk(err, sub, item, multiline_ok=multiline_ok or key in MULTILINE_OK)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(err, f"{path}[{i}]", item, multiline_ok=multiline_ok)


def _name(ch: str) -> str:
    return {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL character"}.get(
        ch, f"a line break (U+{ord(ch):04X})")


def _shown(text: str, limit: int = 60) -> str:
    """The value as a Python literal (escapes visible), cut to ``limit`` characters."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return repr(cut)
