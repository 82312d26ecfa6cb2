"""Telemetry values that cross layers: frozen, units in names, ``None`` = not supported."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol


def opt_float(v: Any) -> float | None:
    """A number read back (a stored column, an event's field) as a float; ``None`` kept
    (a column the run does not have, a field not sent)."""
    return None if v is None else float(v)


def finite_float(value: Any) -> float | None:
    """A finite float, or None (``"nan"``, ``"inf"`` and null are stored as NULL): how an
    event's number (an evaluation's, an iteration's loss) goes into a REAL column, and a
    figure into JSON, which has no NaN."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class GpuStatic:
    """Slow-changing facts of one GPU, read once."""

    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int | None
    power_limit_w: float | None
    driver_version: str | None
    cuda_version: str | None
    simulated: bool
    pci_bus_id: str | None = None
    """NVML's PCI bus id (``00000000:19:00.0``), as dcgm-exporter's ``pci_bus_id`` label."""


@dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU."""

    pid: int
    used_memory_bytes: int | None
    sm_util_pct: float | None


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU. Slow fields are None on fast-path-only readings."""

    t_mono_ns: int
    index: int
    gpu_util_pct: float | None
    mem_util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    power_source: str | None
    """``instant`` (field API), ``average`` (nvmlDeviceGetPowerUsage) or None."""
    energy_j: float | None
    """Cumulative energy counter since driver load, when supported."""
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    processes: tuple[GpuProcess, ...] | None = None
    simulated: bool = False


@dataclass(frozen=True)
class GpuRunFacts:
    """Settings of one GPU as a run starts, recorded with the run's environment.

    Each field is None where NVML does not say (not supported, or the driver is too
    old). Clocks are the current ones, so an idle GPU may show its idle clocks.
    """

    index: int
    """NVML index (the order ``CUDA_VISIBLE_DEVICES`` uses)."""
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    persistence_mode: bool | None
    power_limit_w: float | None
    """Enforced power limit."""
    ecc_enabled: bool | None
    """Current ECC mode (a pending change applies at the next reboot)."""
    pcie_generation: int | None
    """Current PCIe link generation (a GPU at rest may train its link down)."""
    pcie_width_lanes: int | None
    pcie_max_generation: int | None
    pcie_max_width_lanes: int | None
    compute_capability: str | None
    """``major.minor``, e.g. ``9.0`` for an H100."""


@dataclass(frozen=True)
class TreeSample:
    """A run's whole process tree at one moment."""

    root_pid: int
    n_processes: int
    pids: frozenset[int]
    cpu_pct: float
    rss_bytes: int
    threads: int
    cpu_time_s: float = 0.0
    """Cumulative user + system seconds of the tree's live processes (and of the
    children they reaped): the run's own share of its pinned CPUs' busy time."""


@dataclass(frozen=True)
class HostSample:
    """One reading of the host (and, as fed to a run's accumulator, that run's process tree)."""

    t_mono_ns: int
    cpu_pct_per_core: tuple[float, ...]
    load_1m: float | None
    mem_used_bytes: int
    mem_total_bytes: int
    swap_used_bytes: int
    tree: TreeSample | None = None
    cpu_busy_s: tuple[float, ...] = ()
    """Cumulative busy seconds (not idle, not iowait) of each logical CPU, by CPU number."""
    self_cpu_s: float | None = None
    """Cumulative user + system seconds of the dltop process itself."""
    cpu_user_pct: float | None = None
    """Host CPU time in user mode (nice included) since the previous reading, in % of
    all logical CPUs' time (0-100); None when no CPU time passed since then."""
    cpu_system_pct: float | None = None
    """Host CPU time in kernel mode (irq and softirq included), as ``cpu_user_pct``."""
    cpu_iowait_pct: float | None = None
    """Host CPU time idle waiting for I/O, as ``cpu_user_pct``; None off Linux."""


@dataclass(frozen=True)
class RunTelemetry:
    """Per-run telemetry summary; field names are the ``runs`` columns."""

    gpu_util_mean_pct: float | None = None
    gpu_util_peak_pct: float | None = None
    gpu_mem_peak_bytes: int | None = None
    gpu_mem_run_peak_bytes: int | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    joules_per_sample: float | None = None
    energy_bound_j: float | None = None
    """Error bound (J) of ``energy_j``: one tick of power at each of the window's edges,
    where the counter is interpolated (:mod:`dltop.telemetry.edges`); None otherwise."""
    cpu_energy_j: float | None = None
    """CPU package energy (RAPL, every package) over the window; None: ``cpu_energy_note``."""
    dram_energy_j: float | None = None
    """DRAM energy (RAPL dram subzones) over the window; None where the host has none."""
    cpu_energy_bound_j: float | None = None
    """Error bound (J) of ``cpu_energy_j + dram_energy_j`` from the edges' interpolation."""
    cpu_joules_per_sample: float | None = None
    """(``cpu_energy_j`` + ``dram_energy_j``) over the samples of the measured iterations."""
    cpu_energy_note: str | None = None
    """Why the CPU energy is n/a (no powercap, not permitted, a counter went backwards)."""
    host_cpu_mean_pct: float | None = None
    host_cpu_user_pct: float | None = None
    """Mean host CPU in user mode over the window, in % of all logical CPUs (nice included)."""
    host_cpu_system_pct: float | None = None
    """Mean host CPU in kernel mode over the window (irq, softirq included), as above."""
    host_cpu_iowait_pct: float | None = None
    """Mean host CPU idle waiting for I/O over the window, as above (None off Linux)."""
    rss_peak_bytes: int | None = None
    tree_cpu_mean_pct: float | None = None
    """Mean CPU of the run's process tree over the window (100 = one core)."""
    throttle_reasons: str | None = None
    sm_clock_start_mhz: float | None = None
    sm_clock_end_mhz: float | None = None
    contaminated: bool | None = None
    """Another process used the run's GPUs, or its pinned CPUs beyond the threshold,
    during the measured window; None when neither could be checked."""
    contamination: str | None = None
    """Why ``contaminated`` is set: ``gpu: pid 123 (python)``, ``cpu: 35% of CPUs 0 ...``."""
    cpu_foreign_pct: float | None = None
    """CPU time of processes outside the run's tree on its pinned CPUs, in % of
    those CPUs' capacity over the window (None when the run is not pinned)."""
    window_s: float | None = None
    """Length of the measured window the summary covers (None: no measured iteration)."""
    energy_run_j: float | None = None
    """Energy of the run's GPUs from spawn to exit (warm-up and start-up included)."""
    telemetry_note: str | None = None
    """Why the window figures are empty (e.g. no measured iteration), else None."""
    telemetry_simulated: bool | None = False
    """Fake GPUs' readings (None: a run whose row holds no summary, read back)."""
    sampler_achieved_hz: float | None = None
    """GPU ticks per second the sampler really performed during the run."""
    gpu_samples: int = 0
    host_samples: int = 0
    gpu_readings: int | None = None
    """GPU readings inside the measured window, the fewest of the run's GPUs (None: no
    GPU, or no window): the count behind every GPU figure (:mod:`dltop.telemetry.readings`)."""
    host_readings: int | None = None
    """Host readings inside the measured window (None: no window): the count behind the
    host CPU, process-tree CPU and RSS figures."""
    telemetry_read_errors: int | None = 0
    """Readings of the run's GPUs or of the host that raised and were skipped (None: as
    ``telemetry_simulated``)."""
    idle_power_w: float | None = None
    """A serve run's GPUs' mean power (summed over them) while its runner waited, just
    before its load (None: no wait, or a GPU without a reading in it)."""
    idle_window_s: float | None = None
    """That wait's length (the runner's ``IDLE_WINDOW_S``)."""
    idle_readings: int | None = None
    """GPU readings inside that wait, the fewest of the run's GPUs."""
    cpu_idle_power_w: float | None = None
    """The host's CPU packages' and DRAM's power (RAPL) over that wait (None: no RAPL)."""
    extra: dict[str, float] = field(default_factory=dict)


class GpuBackend(Protocol):
    """What the sampler needs of a GPU source (real NVML or the fake)."""

    simulated: bool

    def device_count(self) -> int:
        """Number of GPUs."""

    def static(self, index: int) -> GpuStatic:
        """Cached slow-changing facts."""

    def sample(self, index: int, slow: bool) -> GpuSample:
        """Read one GPU; ``slow`` adds temperature, clocks, throttle reasons and processes."""

    def unavailable_reason(self) -> str | None:
        """Why there are no GPUs, or None."""
