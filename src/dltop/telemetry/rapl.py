"""CPU package and DRAM energy from Linux powercap (RAPL): the one reader of its counters.

Intel exposes ``intel-rapl:N`` (package N; ``name`` ``package-N``) with subzones
``intel-rapl:N:M`` (``core``, ``uncore``, ``dram``); AMD the same under
``amd-rapl``. Each zone has ``energy_uj``, a counter in µJ that wraps at
``max_energy_range_uj``. dltop sums the packages into ``package_j`` and the
``dram`` zones into ``dram_j``; ``core`` and ``uncore`` are parts of their
package and ``psys`` (the whole platform) includes it, so they are not added.

Each zone's counter is unwrapped into a total that only grows: a reading
below the previous one is a wrap when the wrapped delta means a plausible
power (below :data:`MAX_ZONE_W`); anything else (a counter that went backwards,
content that is not a number, a file that vanished) is a *fault*: that reading
has no figure, the fault count grows (so a window that spans it is n/a, with the
note saying why) and the zone goes on from its new value.

``energy_uj`` is root-only on Linux 5.10 and later (CVE-2020-8694, "Platypus"):
then :meth:`RaplReader.unavailable_reason` says so, as it does when there are
no zones. ``DLTOP_POWERCAP_ROOT`` points the reader at another tree (tests use a
fake one).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT_ENV = "DLTOP_POWERCAP_ROOT"
DEFAULT_ROOT = "/sys/class/powercap"
MAX_ZONE_W = 5000.0
"""No RAPL zone draws more: a "wrap" implying more is a counter that went backwards."""
_ZONE = re.compile(r"^(intel|amd)-rapl:\d+(:\d+)?$")


@dataclass(frozen=True)
class RaplSample:
    """Cumulative CPU energy since the reader started, at one instant."""

    t_mono_ns: int
    package_j: float | None
    """Every package's energy, unwrapped; None when a zone faulted at this reading."""
    dram_j: float | None
    """Every ``dram`` zone's energy; None when the host has none or one faulted."""
    faults: int
    """Faults since the reader started (a window spanning a new one is n/a)."""
    fault_note: str | None
    """The latest fault: which file, what was wrong."""


@dataclass
class _Zone:
    path: Path
    kind: str  # "package" or "dram"
    range_uj: int | None
    last_uj: int | None = None
    total_j: float = 0.0
    last_ns: int | None = None


def _read_int(path: Path) -> int:
    text = path.read_text().strip()
    if not text.isdigit():
        raise ValueError(f"{path}: not a counter: {text[:40]!r}")
    return int(text)


class RaplReader:
    """Reads and unwraps every package and DRAM zone of the host.

    Args:
        root: the powercap tree; default ``$DLTOP_POWERCAP_ROOT`` or ``/sys/class/powercap``.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT)
        self._zones: list[_Zone] = []
        self._reason: str | None = None
        self.faults = 0
        self.fault_note: str | None = None
        self._discover()

    def _discover(self) -> None:
        try:
            names = sorted(p.name for p in self.root.iterdir() if _ZONE.match(p.name))
        except OSError:
            names = []
        zones = []
        for name in names:
            d = self.root / name
            try:
                label = (d / "name").read_text().strip()
            except OSError:
                continue
            kind = ("package" if label.startswith("package") and name.count(":") == 1
                    else "dram" if label == "dram" else None)
            if kind is None:
                continue
            try:
                _read_int(d / "energy_uj")
            except PermissionError:
                self._reason = (f"{d / 'energy_uj'}: permission denied (root-only since Linux "
                                "5.10; run as root or make it readable)")
                return
            except (OSError, ValueError) as exc:
                self._reason = f"{d / 'energy_uj'}: unreadable: {exc}"
                return
            try:
                rng: int | None = _read_int(d / "max_energy_range_uj")
            except (OSError, ValueError):
                rng = None  # no wrap can be undone: a decrease is then a fault
            zones.append(_Zone(d / "energy_uj", kind, rng))
        if not any(z.kind == "package" for z in zones) and self._reason is None:
            self._reason = f"no RAPL package zone under {self.root}"
            return
        self._zones = zones

    def unavailable_reason(self) -> str | None:
        """Why there is no CPU energy (no zones, not permitted), or None."""
        return self._reason

    def read(self, t_mono_ns: int) -> RaplSample | None:
        """Read every zone now; None when unavailable."""
        if not self._zones:
            return None
        faulted = False
        for z in self._zones:
            faulted |= not self._advance(z, t_mono_ns)
        package = [z.total_j for z in self._zones if z.kind == "package"]
        dram = [z.total_j for z in self._zones if z.kind == "dram"]
        return RaplSample(t_mono_ns, None if faulted else sum(package),
                          None if faulted or not dram else sum(dram), self.faults,
                          self.fault_note)

    def _advance(self, z: _Zone, t_ns: int) -> bool:
        """Add the zone's energy since its last reading; False on a fault."""
        try:
            now = _read_int(z.path)
        except (OSError, ValueError) as exc:
            return self._fault(f"{exc}" if isinstance(exc, ValueError) else
                               f"{z.path}: {exc.strerror or exc}")
        prev, prev_ns = z.last_uj, z.last_ns
        z.last_uj, z.last_ns = now, t_ns
        if prev is None or prev_ns is None:
            return True
        delta = now - prev
        if delta < 0:
            dt = max((t_ns - prev_ns) / 1e9, 1e-3)
            wrapped = now + (z.range_uj or 0) - prev if z.range_uj else None
            if wrapped is None or wrapped < 0 or wrapped / 1e6 / dt > MAX_ZONE_W:
                return self._fault(f"{z.path}: counter went backwards ({prev} -> {now} µJ, "
                                   f"not a wrap at {z.range_uj} µJ)")
            delta = wrapped
        z.total_j += delta / 1e6
        return True

    def _fault(self, note: str) -> bool:
        self.faults += 1
        self.fault_note = note
        return False
