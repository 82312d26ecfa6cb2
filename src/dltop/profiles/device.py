"""Where a job runs on one node: ``cpu:N``, ``cpus:P`` or ``gpu:N`` (:class:`DeviceSpec`).

A profile's ``devices`` entries parse to it, the allocator hands out devices by it
and a job's ``device`` columns are read off it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from dltop.profiles.fields import given

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


def device_list(v: object, cores: int, *, max_gpus: int, max_cpus: int) -> list[DeviceSpec]:
    """One ``devices`` entry of a profile as its devices: ``cpu:1..max`` (``cpu:all``) is
    :func:`thread_ladder` of this host's ``cores``.

    Raises:
        ValueError: not a device string, or more than ``max_gpus`` / ``max_cpus``.
    """
    if not isinstance(v, str):
        raise ValueError(f"expected a string like 'cpu:2', 'cpus:2' or 'gpu:1', "
                         f"got {given(v)}")
    if v.strip() in ("cpu:1..max", "cpu:all"):
        return [DeviceSpec("cpu", n) for n in thread_ladder(cores)]
    try:
        dev = DeviceSpec.parse(v)
    except ValueError as exc:
        raise ValueError(f"{exc} (or 'cpu:1..max' for 1, 2, 4, ... cores)") from None
    most = max_gpus if dev.kind == "gpu" else max_cpus
    if dev.count > most:
        what = "GPUs per node" if dev.kind == "gpu" else "CPUs"
        raise ValueError(f"{dev.label}: expected at most {most} {what} "
                         "(docs/profiles.md#value-ranges)")
    return [dev]


def thread_ladder(cores: int) -> list[int]:
    """1, 2, 4, ... up to ``cores``, ending with ``cores`` itself."""
    ladder = [1]
    while ladder[-1] * 2 <= cores:
        ladder.append(ladder[-1] * 2)
    if ladder[-1] != cores:
        ladder.append(cores)
    return ladder
