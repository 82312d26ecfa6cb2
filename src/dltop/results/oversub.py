"""``cpu:N`` on a host with fewer than N logical CPUs: oversubscribed, flagged in every table.

``dltop run`` warns on stderr when a profile asks for more CPUs than the host has (the
run is then not pinned and its threads share cores), but a table read later showed a
clean ``cpu:8`` column. The stored environment of each run (``environment.logical_cores``,
the host's count when the run started) says it afterwards: a configuration whose ok runs
ran on fewer logical CPUs than its device asks for is marked ``!`` in its cells,
``oversubscribed`` in the summary's flags, and its tables' caption says
``cpu:8 on a 2-core host: oversubscribed``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

MARK = "!"
"""The cells' mark of an oversubscribed configuration (beside ``*`` noisy, ``§``...)."""
FLAG = "oversubscribed"
"""Its name in the summary's flags."""
NOTE = ("! oversubscribed: the configuration asked for more CPUs than its host has (the run "
        "was not pinned and its threads shared cores): not a figure of that many cores.")
"""The pivot's footnote on the mark."""


class Placed(Protocol):
    """What the caption reads of a configuration (a :class:`ConfigResult`)."""

    @property
    def device(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def host_cores(self) -> int | None: ...

    @property
    def oversubscribed(self) -> bool: ...


def caption_lines(results: Iterable[Placed]) -> tuple[str, ...]:
    """``cpu:8 on a 2-core host: oversubscribed``, once per device, host and count."""
    seen: dict[tuple[str, str, int], None] = {}
    for r in results:
        if r.oversubscribed and r.host_cores is not None:
            seen.setdefault((r.device, r.host, r.host_cores))
    many_hosts = len({host for _, host, _ in seen}) > 1
    return tuple(f"{device} on a {cores}-core host{f' ({host})' if many_hosts and host else ''}"
                 ": oversubscribed" for device, host, cores in seen)
