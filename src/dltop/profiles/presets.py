"""Presets for known training programs (``preset = "..."`` in a command entry).

A preset is a documented set of defaults for a ``frameworks = ["command"]``
entry's keys (``iteration_regex``, ``timing``, ``cumulative``,
``steps_per_match``, ``warmup``); a key the entry sets itself wins. See
docs/own-programs.md for each preset's program and example profile.
"""

from collections.abc import Mapping
from typing import Any, Final

PRESET_KEYS: Final = ("iteration_regex", "timing", "cumulative", "steps_per_match", "warmup")
"""The keys a preset may give defaults for."""

PRESETS: Final[Mapping[str, Mapping[str, Any]]] = {}
"""Preset name → its defaults (keys from :data:`PRESET_KEYS`)."""


def preset_defaults(name: str) -> Mapping[str, Any]:
    """The defaults of preset ``name``.

    Raises:
        KeyError: no preset is called ``name`` (the caller names the known ones).
    """
    return PRESETS[name]
