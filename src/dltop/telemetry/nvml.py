"""The only module that talks to NVML (``pynvml`` from the nvidia-ml-py package).

NVML is initialised lazily, once per process, and shut down at exit. When it
cannot load (no NVIDIA driver, no GPU) every query answers "no GPUs" and
:func:`unavailable_reason` says why. A field a GPU does not support is
``None``, logged once per field; no NVML error escapes this module.

Fast path (every GPU tick): utilization, memory, power and the energy counter
(one field-values call for instant power and energy where supported). Slow
path (every few ticks): temperature, clocks, throttle reasons, processes. PCIe
throughput (about 20 ms per call) is left out.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from dltop.telemetry.model import GpuProcess, GpuSample, GpuStatic

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, Any] = {"tried": False, "nvml": None, "reason": None}
_VALUE_ATTRS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


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
        self.call_count = 0

    def unavailable_reason(self) -> str | None:
        """Why there are no GPUs, or None."""
        return unavailable_reason()

    def device_count(self) -> int:
        """Number of GPUs (0 without NVML)."""
        return device_count() if self._nvml is not None else 0

    def _q(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; a failure (NotSupported or any NVMLError) is None, logged once."""
        self.call_count += 1
        try:
            return fn(*args)
        except Exception as exc:
            if field not in self._warned:
                self._warned.add(field)
                log.info("NVML field %s unavailable: %s", field, exc)
            return None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def static(self, index: int) -> GpuStatic:
        """Name, UUID, memory total, power limit, driver and CUDA versions (cached)."""
        if index not in self._static:
            n, h = self._nvml, self._handle(index)
            mem = self._q("memory", n.nvmlDeviceGetMemoryInfo, h)
            limit = self._q("power_limit", n.nvmlDeviceGetEnforcedPowerLimit, h)
            cuda = self._q("cuda_version", n.nvmlSystemGetCudaDriverVersion)
            self._static[index] = GpuStatic(
                index=index, name=_text(self._q("name", n.nvmlDeviceGetName, h) or "GPU"),
                uuid=(_text(u) if (u := self._q("uuid", n.nvmlDeviceGetUUID, h)) else None),
                memory_total_bytes=int(mem.total) if mem is not None else None,
                power_limit_w=limit / 1000.0 if limit is not None else None,
                driver_version=(_text(d) if (d := self._q(
                    "driver", n.nvmlSystemGetDriverVersion)) else None),
                cuda_version=(f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None),
                simulated=False,
            )
        return self._static[index]

    def _power_energy(self, index: int, h: Any) -> tuple[float | None, str | None, float | None]:
        n = self._nvml
        power = energy = None
        source = None
        if self._instant_ok.get(index, True):
            vals = self._q("field_values", n.nvmlDeviceGetFieldValues, h,
                           [n.NVML_FI_DEV_POWER_INSTANT, n.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION])
            if vals is not None and len(vals) == 2:
                p, e = (self._field(v) for v in vals)
                if p is not None:
                    power, source = p / 1000.0, "instant"
                if e is not None:
                    energy = e / 1000.0
            if power is None:
                self._instant_ok[index] = False
        if power is None:
            mw = self._q("power_usage", n.nvmlDeviceGetPowerUsage, h)
            if mw is not None:
                power, source = mw / 1000.0, "average"
        if energy is None:
            mj = self._q("total_energy", n.nvmlDeviceGetTotalEnergyConsumption, h)
            energy = mj / 1000.0 if mj is not None else None
        return power, source, energy

    @staticmethod
    def _field(v: Any) -> float | None:
        if getattr(v, "nvmlReturn", 1) != 0:
            return None
        attr = _VALUE_ATTRS.get(int(getattr(v, "valueType", 1)), "uiVal")
        return float(getattr(v.value, attr))

    def sample(self, index: int, slow: bool) -> GpuSample:
        """Read one GPU (slow fields only when ``slow``)."""
        n, h = self._nvml, self._handle(index)
        t = time.monotonic_ns()
        util = self._q("utilization", n.nvmlDeviceGetUtilizationRates, h)
        mem = self._q("memory", n.nvmlDeviceGetMemoryInfo, h)
        power, source, energy = self._power_energy(index, h)
        base: dict[str, Any] = dict(
            t_mono_ns=t, index=index,
            gpu_util_pct=float(util.gpu) if util is not None else None,
            mem_util_pct=float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            power_w=power, power_source=source, energy_j=energy,
        )
        if slow:
            temp = self._q("temperature", n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
            sm = self._q("sm_clock", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)
            memclk = self._q("mem_clock", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM)
            reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                n.nvmlDeviceGetCurrentClocksThrottleReasons
            base.update(
                temperature_c=float(temp) if temp is not None else None,
                sm_clock_mhz=float(sm) if sm is not None else None,
                mem_clock_mhz=float(memclk) if memclk is not None else None,
                throttle_reasons=self._q("throttle_reasons", reasons_fn, h),
                processes=self._processes(index, h),
            )
        return GpuSample(**base)

    def _processes(self, index: int, h: Any) -> tuple[GpuProcess, ...] | None:
        n = self._nvml
        procs = self._q("processes", n.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is None:
            return None
        sm: dict[int, float] = {}
        util = self._q("process_utilization", n.nvmlDeviceGetProcessUtilization, h,
                       self._last_seen_us.get(index, 0))
        if util:
            for u in util:
                sm[int(u.pid)] = float(u.smUtil)
            self._last_seen_us[index] = max(int(u.timeStamp) for u in util)
        return tuple(GpuProcess(int(p.pid),
                                int(p.usedGpuMemory) if p.usedGpuMemory is not None else None,
                                sm.get(int(p.pid))) for p in procs)
