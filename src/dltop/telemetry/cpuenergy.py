"""One run's CPU energy (RAPL package and DRAM) over its measured window.

Fed every :class:`~dltop.telemetry.rapl.RaplSample` while the run lasts; the
window's energy is each counter interpolated at the window's edges
(:func:`dltop.telemetry.edges.window_energy`; RAPL gives no instant power, so the
interpolation is linear in time and its bound the counter's step around each
edge: at most one sampler tick of CPU energy). The counters are the host's, not
the run's: packed runs on one host each count all of it (the docs say so).
"""

from __future__ import annotations

from dltop.telemetry.edges import EDGE_SLACK, Reading, keep_for_edges, window_energy
from dltop.telemetry.rapl import RaplSample
from dltop.telemetry.values import RunTelemetry

MAX_READINGS = 100_000


class CpuEnergyTrack:
    """The RAPL readings one run's window edges need, and the faults among them.

    Args:
        unavailable: why the host gives no CPU energy (None: it does).
    """

    def __init__(self, unavailable: str | None) -> None:
        self.unavailable = unavailable
        self._package: list[Reading] = []
        self._dram: list[Reading] = []
        self._faults: list[tuple[int, str]] = []  # (t ns, note) of each new fault
        self._last_faults: int | None = None
        self._idle: tuple[int, int] | None = None  # a wait whose power is not known yet
        self.idle_power_w: float | None = None
        """The host's CPU power (package + DRAM) over a serve run's idle wait before its
        load (:meth:`idle`); None: no wait, no RAPL, or a fault inside it."""

    def idle(self, start_ns: int, end_ns: int) -> None:
        """The run waited idle from ``start_ns`` to ``end_ns``: its power once a reading
        follows the end (the readings are kept, untrimmed, until then)."""
        self._idle = (start_ns, end_ns) if self.unavailable is None and end_ns > start_ns \
            else None
        self._idle_power()

    def _idle_power(self) -> None:
        if self._idle is None or not self._package or self._package[-1][0] < self._idle[1]:
            return
        (start, end), self._idle = self._idle, None
        if any(start - 2e9 <= t <= end + 2e9 for t, _ in self._faults):
            return
        pkg = window_energy(self._package, start, end)
        dram = window_energy(self._dram, start, end) if self._dram else None
        if pkg is not None:
            self.idle_power_w = (pkg[0] + (dram[0] if dram else 0.0)) / ((end - start) / 1e9)

    def add(self, s: RaplSample) -> None:
        """One reading of the host's counters."""
        if self._last_faults is not None and s.faults > self._last_faults:
            self._faults.append((s.t_mono_ns, s.fault_note or "a RAPL counter faulted"))
        self._last_faults = s.faults
        if s.package_j is not None:
            self._package.append((s.t_mono_ns, None, s.package_j))
        if s.dram_j is not None:
            self._dram.append((s.t_mono_ns, None, s.dram_j))
        for readings in (self._package, self._dram):
            if len(readings) > MAX_READINGS:
                del readings[:MAX_READINGS // 2]
        self._idle_power()

    def trim(self, start_ns: int | None, end_ns: int | None) -> None:
        """Keep only what the edges need (see :func:`~dltop.telemetry.edges.keep_for_edges`)."""
        if self._idle is not None:  # the idle wait's edges are still needed
            return
        if len(self._package) > EDGE_SLACK:
            self._package = keep_for_edges(self._package, start_ns, end_ns)
        if len(self._dram) > EDGE_SLACK:
            self._dram = keep_for_edges(self._dram, start_ns, end_ns)

    def summary(self, start_ns: int, end_ns: int, samples: int | None) -> RunTelemetry:
        """The window's CPU energy columns, or why there are none (the run's summary
        with those alone filled in); ``samples``: of the measured iterations (J/sample)."""
        if self.unavailable is not None:
            return RunTelemetry(cpu_energy_note=f"n/a: {self.unavailable}")
        hit = [note for t, note in self._faults if start_ns - 2e9 <= t <= end_ns + 2e9]
        if hit:
            return RunTelemetry(cpu_energy_note=f"n/a: {hit[-1]}")
        pkg = window_energy(self._package, start_ns, end_ns)
        if pkg is None:
            return RunTelemetry(cpu_energy_note="n/a: no RAPL reading around the window")
        dram = window_energy(self._dram, start_ns, end_ns) if self._dram else None
        total = pkg[0] + (dram[0] if dram else 0.0)
        return RunTelemetry(
            cpu_energy_j=pkg[0], dram_energy_j=dram[0] if dram else None,
            cpu_energy_bound_j=pkg[1] + (dram[1] if dram else 0.0),
            cpu_joules_per_sample=total / samples if samples else None)
