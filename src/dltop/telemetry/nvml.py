"""The only module that talks to NVML (``pynvml`` from the nvidia-ml-py package).

NVML is initialised lazily, once per process, and shut down at exit. When it
cannot load (no NVIDIA driver, no GPU) every query answers "no GPUs" and
:func:`unavailable_reason` says why. No NVML error escapes this module; like
nvitop's ``nvmlQuery``, every call answers ``None`` (N/A) on failure, told
apart by cause:

- ``NotSupported``: the GPU lacks the field; logged once per field at info.
- ``FunctionNotFound`` (or a pynvml without the function): the driver is too
  old for it; logged once per field as a warning.
- ``GpuIsLost`` / ``Unknown``: the GPU fell off the bus or the driver is
  wedged; logged once per GPU as a warning naming its index.
- any other error: logged once per field as a warning.

Fast path (every GPU tick): utilization, memory and power (the instant power
field where supported). The energy counter is the one expensive reading (about
2.8 ms a call on an H200 with driver 580, against 1-13 µs for the others): it is
read with the power, in the same field-values call, at most every
:data:`ENERGY_EVERY_S` per GPU. Slow path (every few ticks): temperature, clocks,
throttle reasons, processes; per-process utilization answers NVML "Not Found"
when no process has samples, which means "none", not a failure, and is then
asked again only after :data:`PROC_UTIL_BACKOFF_S` (about 2.2 ms a call). PCIe
throughput (about 20 ms per call) is left out. Budget, measured on the H200
(docs/telemetry.md): 8 GPUs at 10 Hz cost about 3.5 % of a core, against 25 %
when every tick read the energy counter.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from dltop.telemetry.values import GpuProcess, GpuRunFacts, GpuSample, GpuStatic

log = logging.getLogger(__name__)
ENERGY_EVERY_S = 1.0
"""Longest wait between two readings of a GPU's energy counter (seconds)."""
PROC_UTIL_BACKOFF_S = 2.0
"""After per-process utilization had no samples, ask again after this many seconds."""
_lock = threading.Lock()
_state: dict[str, Any] = {"tried": False, "nvml": None, "reason": None}
_VALUE_ATTRS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
_KINDS = (("not_supported", "NVMLError_NotSupported"),
          ("function_not_found", "NVMLError_FunctionNotFound"),
          ("gpu_lost", "NVMLError_GpuIsLost"), ("gpu_lost", "NVMLError_Unknown"))


def _nvml() -> Any | None:
    """The initialised pynvml module, or None (reason kept for unavailable_reason)."""
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            try:
                import pynvml  # noqa: TID251 - this module owns NVML

                pynvml.nvmlInit()
                _state["nvml"] = pynvml
                atexit.register(_shutdown)
            except ImportError as exc:
                _state["reason"] = f"nvidia-ml-py is not installed ({exc})"
            except Exception as exc:
                _state["reason"] = f"NVML not available: {exc}"
        return _state["nvml"]


def _shutdown() -> None:
    nvml = _state["nvml"]
    if nvml is not None:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
        _state["nvml"] = None


def reset_for_tests() -> None:
    """Forget the NVML state so a test can inject a fake ``pynvml`` module."""
    with _lock:
        _state.update(tried=False, nvml=None, reason=None)


def unavailable_reason() -> str | None:
    """Why NVML cannot be used on this host, or None when it works."""
    _nvml()
    reason = _state["reason"]
    return str(reason) if reason is not None else None


def device_count() -> int:
    """Number of NVIDIA GPUs NVML sees (0 when NVML is unavailable)."""
    nvml = _nvml()
    if nvml is None:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def gpu_run_facts(index: int) -> GpuRunFacts | None:
    """Clocks, persistence mode, power limit, ECC, PCIe link and compute capability of
    GPU ``index`` now (None when NVML is unavailable or the GPU has no handle)."""
    if _nvml() is None:
        return None
    return NvmlBackend().run_facts(index)


def compute_capability(index: int) -> tuple[int, int] | None:
    """CUDA compute capability ``(major, minor)`` of GPU ``index`` (None: NVML cannot say)."""
    facts = gpu_run_facts(index)
    if facts is None or facts.compute_capability is None:
        return None
    major, _, minor = facts.compute_capability.partition(".")
    return int(major), int(minor)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """Real GPUs through NVML, with cached handles and static fields."""

    simulated = False

    def __init__(self) -> None:
        self._nvml: Any = _nvml()
        self._handles: dict[int, Any] = {}
        self._static: dict[int, GpuStatic] = {}
        self._warned: set[str] = set()
        self._instant_ok: dict[int, bool] = {}
        self._last_seen_us: dict[int, int] = {}
        self._energy_due_ns: dict[int, int] = {}
        self._proc_util_due_ns: dict[int, int] = {}
        self.call_count = 0

    def unavailable_reason(self) -> str | None:
        """Why there are no GPUs, or None."""
        return unavailable_reason()

    def device_count(self) -> int:
        """Number of GPUs (0 without NVML)."""
        return device_count() if self._nvml is not None else 0

    def _q(self, gpu: int | None, field: str, call: Callable[[], Any]) -> Any:
        """``call()`` (one NVML query about ``gpu``; None: the system), or None on any
        failure, logged once. The call is a lambda so that a function or constant this
        pynvml lacks fails inside the guard too."""
        self.call_count += 1
        try:
            return call()
        except Exception as exc:
            self._log_once(gpu, field, self._kind(exc), exc)
            return None

    def _kind(self, exc: Exception) -> str:
        if isinstance(exc, AttributeError):  # pynvml older than the call
            return "function_not_found"
        for kind, name in _KINDS:
            cls = getattr(self._nvml, name, None)
            if isinstance(cls, type) and isinstance(exc, cls):
                return kind
        return "error"

    def _log_once(self, gpu: int | None, field: str, kind: str, exc: Exception) -> None:
        # A lost GPU fails every field: one line per GPU, not one per field.
        key = f"{kind}:{gpu}" if kind == "gpu_lost" else field
        if key in self._warned:
            return
        self._warned.add(key)
        if kind == "not_supported":
            log.info("NVML field %s not supported: %s", field, exc)
        elif kind == "function_not_found":
            log.warning("NVML field %s: the driver or pynvml lacks the function: %s", field, exc)
        elif kind == "gpu_lost":
            log.warning("NVML: GPU %s is lost or in an unknown state (%s, reading %s); its "
                        "fields read N/A", gpu, exc, field)
        else:
            log.warning("NVML field %s failed: %s", field, exc)

    def _handle(self, index: int) -> Any | None:
        """The device handle (cached once NVML gave it; None while it cannot)."""
        if index not in self._handles:
            h = self._q(index, "handle", lambda: self._nvml.nvmlDeviceGetHandleByIndex(index))
            if h is None:
                return None
            self._handles[index] = h
        return self._handles[index]

    def static(self, index: int) -> GpuStatic:
        """Name, UUID, memory total, power limit, driver and CUDA versions, PCI bus id
        (cached)."""
        if index in self._static:
            return self._static[index]
        n, h = self._nvml, self._handle(index)
        q = functools.partial(self._q, index)
        if h is None:  # not cached: the GPU may come back
            return GpuStatic(index, "GPU", None, None, None, None, None, simulated=False)
        mem = q("memory", lambda: n.nvmlDeviceGetMemoryInfo(h))
        limit = q("power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
        cuda = self._q(None, "cuda_version", lambda: n.nvmlSystemGetCudaDriverVersion())
        pci = q("pci", lambda: n.nvmlDeviceGetPciInfo(h))
        self._static[index] = GpuStatic(
            index=index, name=_text(q("name", lambda: n.nvmlDeviceGetName(h)) or "GPU"),
            uuid=(_text(u) if (u := q("uuid", lambda: n.nvmlDeviceGetUUID(h))) else None),
            memory_total_bytes=int(mem.total) if mem is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            driver_version=(_text(d) if (d := self._q(
                None, "driver", lambda: n.nvmlSystemGetDriverVersion())) else None),
            cuda_version=(f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None),
            simulated=False,
            pci_bus_id=_text(pci.busId) if pci is not None and pci.busId else None,
        )
        return self._static[index]

    def run_facts(self, index: int) -> GpuRunFacts | None:
        """See :func:`gpu_run_facts` (read fresh, never cached: clocks change)."""
        n, h = self._nvml, self._handle(index)
        if h is None:
            return None
        q = functools.partial(self._q, index)

        def num(field: str, call: Callable[[], Any]) -> int | None:
            v = q(field, call)
            return int(v) if isinstance(v, int | float) else None

        ecc = q("ecc_mode", lambda: n.nvmlDeviceGetEccMode(h))  # [current, pending]
        cc = q("compute_capability", lambda: n.nvmlDeviceGetCudaComputeCapability(h))
        limit = num("power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
        persistence = num("persistence_mode", lambda: n.nvmlDeviceGetPersistenceMode(h))
        return GpuRunFacts(
            index=index,
            sm_clock_mhz=num("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            mem_clock_mhz=num("mem_clock",
                              lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            persistence_mode=None if persistence is None else persistence == 1,
            power_limit_w=None if limit is None else limit / 1000.0,
            ecc_enabled=(bool(ecc[0]) if isinstance(ecc, list | tuple) and ecc else None),
            pcie_generation=num("pcie_gen", lambda: n.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            pcie_width_lanes=num("pcie_width", lambda: n.nvmlDeviceGetCurrPcieLinkWidth(h)),
            pcie_max_generation=num("pcie_max_gen",
                                    lambda: n.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            pcie_max_width_lanes=num("pcie_max_width",
                                     lambda: n.nvmlDeviceGetMaxPcieLinkWidth(h)),
            compute_capability=(f"{int(cc[0])}.{int(cc[1])}"
                                if isinstance(cc, list | tuple) and len(cc) == 2 else None),
        )

    def _power_energy(self, index: int, h: Any,
                      now_ns: int) -> tuple[float | None, str | None, float | None]:
        """Power, its source and, when due (:data:`ENERGY_EVERY_S`), the energy counter."""
        n = self._nvml
        power = energy = None
        source = None
        with_energy = now_ns >= self._energy_due_ns.get(index, 0)
        if with_energy:
            self._energy_due_ns[index] = now_ns + int(ENERGY_EVERY_S * 1e9)
        if self._instant_ok.get(index, True):
            ids = [n.NVML_FI_DEV_POWER_INSTANT]
            if with_energy:
                ids.append(n.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)
            vals = self._q(index, "field_values" if with_energy else "power_field",
                           lambda: n.nvmlDeviceGetFieldValues(h, ids))
            if vals is not None and len(vals) == len(ids):
                p = self._field(vals[0])
                if p is not None:
                    power, source = p / 1000.0, "instant"
                if with_energy and (e := self._field(vals[1])) is not None:
                    energy = e / 1000.0
            if power is None:
                self._instant_ok[index] = False
        if power is None:
            mw = self._q(index, "power_usage", lambda: n.nvmlDeviceGetPowerUsage(h))
            if mw is not None:
                power, source = mw / 1000.0, "average"
        if with_energy and energy is None:
            mj = self._q(index, "total_energy",
                         lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
            energy = mj / 1000.0 if mj is not None else None
        return power, source, energy

    @staticmethod
    def _field(v: Any) -> float | None:
        """One field value's number; None when NVML failed it or it cannot be read."""
        try:
            if getattr(v, "nvmlReturn", 1) != 0:
                return None
            attr = _VALUE_ATTRS.get(int(getattr(v, "valueType", 1)), "uiVal")
            return float(getattr(v.value, attr))
        except (AttributeError, TypeError, ValueError):
            return None

    def sample(self, index: int, slow: bool) -> GpuSample:
        """Read one GPU (slow fields only when ``slow``)."""
        n, h = self._nvml, self._handle(index)
        t = time.monotonic_ns()
        if h is None:
            return GpuSample(t, index, None, None, None, None, None, None, None)
        q = functools.partial(self._q, index)
        util = q("utilization", lambda: n.nvmlDeviceGetUtilizationRates(h))
        mem = q("memory", lambda: n.nvmlDeviceGetMemoryInfo(h))
        power, source, energy = self._power_energy(index, h, t)
        base: dict[str, Any] = dict(
            t_mono_ns=t, index=index,
            gpu_util_pct=float(util.gpu) if util is not None else None,
            mem_util_pct=float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            power_w=power, power_source=source, energy_j=energy,
        )
        if slow:
            temp = q("temperature",
                     lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
            sm = q("sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
            memclk = q("mem_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))

            def reasons() -> Any:
                fn = (getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or
                      n.nvmlDeviceGetCurrentClocksThrottleReasons)  # the older name
                return fn(h)

            base.update(
                temperature_c=float(temp) if temp is not None else None,
                sm_clock_mhz=float(sm) if sm is not None else None,
                mem_clock_mhz=float(memclk) if memclk is not None else None,
                throttle_reasons=q("throttle_reasons", reasons),
                processes=self._processes(index, h),
            )
        return GpuSample(**base)

    def _processes(self, index: int, h: Any) -> tuple[GpuProcess, ...] | None:
        n = self._nvml
        procs = self._q(index, "processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(h))
        if procs is None:
            return None
        sm: dict[int, float] = {}
        now = time.monotonic_ns()
        if now >= self._proc_util_due_ns.get(index, 0):
            since_us = self._last_seen_us.get(index, 0)
            not_found = getattr(n, "NVMLError_NotFound", None)

            def utilization() -> Any:
                try:
                    return n.nvmlDeviceGetProcessUtilization(h, since_us)
                except Exception as exc:
                    if isinstance(not_found, type) and isinstance(exc, not_found):
                        return []  # no process has samples since then: none, not a failure
                    raise

            util = self._q(index, "process_utilization", utilization)
            if util:
                for u in util:
                    sm[int(u.pid)] = float(u.smUtil)
                self._last_seen_us[index] = max(int(u.timeStamp) for u in util)
            else:
                self._proc_util_due_ns[index] = now + int(PROC_UTIL_BACKOFF_S * 1e9)
        return tuple(GpuProcess(int(p.pid),
                                int(p.usedGpuMemory) if p.usedGpuMemory is not None else None,
                                sm.get(int(p.pid))) for p in procs)
