"""Where a job runs on one node: ``cpu:N``, ``cpus:P`` or ``gpu:N`` (:class:`DeviceSpec`).

A profile's ``devices`` entries parse to it, the allocator hands out devices by it
and a job's ``device`` columns are read off it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

DeviceKind = Literal["cpu", "cpus", "gpu"]

_DEVICE_RE = re.compile(r"^(cpu|cpus|gpu):([0-9]+)$")


@dataclass(frozen=True, order=True)
class DeviceSpec:
    """A device configuration.

    ``cpu:N``: one process, N threads. ``cpus:P``: P CPU worker processes (one
    thread each), data-parallel over gloo. ``gpu:N``: N GPUs, data-parallel.
    """

    kind: DeviceKind
    count: int

    @property
    def label(self) -> str:
        """The profile spelling, e.g. ``cpu:4``."""
        return f"{self.kind}:{self.count}"

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        """Parse ``cpu:N``, ``cpus:P`` or ``gpu:N``.

        Raises:
            ValueError: the text is not of that form or N < 1.
        """
        m = _DEVICE_RE.match(text.strip())
        if not m or int(m.group(2)) < 1:
            raise ValueError(f"expected 'cpu:N', 'cpus:P' or 'gpu:N' with N >= 1, got {text!r}")
        kinds: dict[str, DeviceKind] = {"cpu": "cpu", "cpus": "cpus", "gpu": "gpu"}
        return cls(kinds[m.group(1)], int(m.group(2)))

    @property
    def workers(self) -> int:
        """Data-parallel workers: 1 for ``cpu:N`` (threads), N otherwise."""
        return 1 if self.kind == "cpu" else self.count
