"""The defaults a site gives the profiles loaded under it (``--system NAME``).

:mod:`dltop.systems` reads and checks a ``[systems.NAME]`` table of the config file
into a :class:`System`; the loader only reads one, so it lives here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dltop.profiles.references import Rule


@dataclass(frozen=True)
class System:
    """One validated ``[systems.NAME]`` table."""

    name: str
    source: str
    """``<config file>: systems.NAME``: where its keys came from, for messages."""
    executor: str = "slurm"
    slurm: dict[str, Any] = field(default_factory=dict, hash=False)
    """Its ``[slurm]`` keys as written (validated): the defaults of a profile's table."""
    references: tuple[Rule, ...] = ()
