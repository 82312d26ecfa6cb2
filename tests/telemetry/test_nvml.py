"""The NVML wrapper against a fake ``pynvml`` injected at the import boundary."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from dltop.telemetry import nvml


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


def ns(**kw: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**kw)


def fake_pynvml(instant: bool) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
    consts = dict(NVML_FI_DEV_POWER_INSTANT=186, NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION=83,
                  NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2)
    for k, v in consts.items():
        setattr(m, k, v)

    def unsupported(*a: Any) -> Any:
        raise NVMLError_NotSupported("Not Supported")

    def fields(h: Any, ids: list[int]) -> list[Any]:
        if not instant:
            raise NVMLError_NotSupported("Not Supported")
        return [ns(nvmlReturn=0, valueType=1, value=ns(uiVal=250_000)),
                ns(nvmlReturn=0, valueType=3, value=ns(ullVal=5_000_000))]

    funcs = dict(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}", nvmlDeviceGetName=lambda h: b"Fake H100",
        nvmlDeviceGetUUID=lambda h: "GPU-1", nvmlSystemGetDriverVersion=lambda: "560.1",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetMemoryInfo=lambda h: ns(total=80 * 2**30, used=2**30),
        nvmlDeviceGetUtilizationRates=lambda h: ns(gpu=97, memory=40),
        nvmlDeviceGetFieldValues=fields, nvmlDeviceGetPowerUsage=lambda h: 200_000,
        nvmlDeviceGetTotalEnergyConsumption=unsupported,
        nvmlDeviceGetTemperature=unsupported, nvmlDeviceGetClockInfo=lambda h, c: 1980,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [ns(pid=42, usedGpuMemory=2**29)],
        nvmlDeviceGetProcessUtilization=unsupported,
    )
    for k, v in funcs.items():
        setattr(m, k, v)
    return m


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def go(instant: bool) -> nvml.NvmlBackend:
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(instant))
        nvml.reset_for_tests()
        return nvml.NvmlBackend()

    yield go
    nvml.reset_for_tests()


def test_static_and_fast_fields_with_instant_power(inject: Any) -> None:
    b = inject(True)
    assert b.device_count() == 2 and b.unavailable_reason() is None
    st = b.static(0)
    assert (st.name, st.power_limit_w, st.cuda_version) == ("Fake H100", 700.0, "12.4")
    calls = b.call_count
    assert b.static(0) is st and b.call_count == calls  # cached
    s = b.sample(0, slow=False)
    assert (s.gpu_util_pct, s.power_w, s.power_source, s.energy_j) == (97.0, 250.0,
                                                                       "instant", 5000.0)
    assert s.temperature_c is None and s.processes is None


def test_not_supported_fields_are_none_and_fallbacks_apply(inject: Any) -> None:
    b = inject(False)
    s = b.sample(1, slow=True)
    assert (s.power_w, s.power_source) == (200.0, "average")
    assert s.energy_j is None  # counter unsupported
    assert s.temperature_c is None  # NVMLError_NotSupported -> None
    assert s.sm_clock_mhz == 1980.0 and s.throttle_reasons == 0x4
    assert s.processes is not None and s.processes[0].pid == 42
    assert s.processes[0].sm_util_pct is None


def test_no_library_means_no_gpus_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = types.ModuleType("pynvml")

    def fail() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    broken.nvmlInit = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    nvml.reset_for_tests()
    try:
        assert nvml.device_count() == 0
        assert "Shared Library Not Found" in (nvml.unavailable_reason() or "")
    finally:
        nvml.reset_for_tests()
