"""The NVML wrapper against a fake ``pynvml`` injected at the import boundary."""

from __future__ import annotations

import logging
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


class NVMLError_FunctionNotFound(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_Unknown(NVMLError):
    pass


def ns(**kw: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**kw)


def fake_pynvml(instant: bool) -> types.ModuleType:
    """FAKE NVML (the hardware boundary): two GPUs answering fixed values."""
    m = types.ModuleType("pynvml")
    for cls in (NVMLError, NVMLError_NotSupported, NVMLError_FunctionNotFound,
                NVMLError_GpuIsLost, NVMLError_Unknown):
        setattr(m, cls.__name__, cls)
    consts = dict(NVML_FI_DEV_POWER_INSTANT=186, NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION=83,
                  NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2)
    for k, v in consts.items():
        setattr(m, k, v)

    def unsupported(*a: Any) -> Any:
        raise NVMLError_NotSupported("Not Supported")

    def fields(h: Any, ids: list[int]) -> list[Any]:
        if not instant:
            raise NVMLError_NotSupported("Not Supported")
        values = {186: ns(nvmlReturn=0, valueType=1, value=ns(uiVal=250_000)),
                  83: ns(nvmlReturn=0, valueType=3, value=ns(ullVal=5_000_000))}
        return [values[i] for i in ids]

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
        # as nvidia-ml-py's c_nvmlPciInfo_t: busId bytes, an 8-digit domain
        nvmlDeviceGetPciInfo=lambda h: ns(busId=f"00000000:{0x18 + int(h[1:]):02X}:00.0"
                                          .encode()),
    )
    for k, v in funcs.items():
        setattr(m, k, v)
    return m


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def go(instant: bool, **override: Any) -> nvml.NvmlBackend:
        module = fake_pynvml(instant)
        for name, value in override.items():
            if value is None:
                delattr(module, name)
            else:
                setattr(module, name, value)
        monkeypatch.setitem(sys.modules, "pynvml", module)
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


def test_gpu_series_carry_dcgm_exporter_s_labels_from_nvml(inject: Any) -> None:
    """dcgm-exporter's label set (gpu, UUID, pci_bus_id, device, modelName, Hostname), each
    read from NVML (device: its ``nvidia<gpu>``), so a site's DCGM dashboards and alert
    rules join dltop's series; a bus id NVML does not give is empty, never made up."""
    from dltop.live.devices import DevicePoller
    from dltop.live.metrics import gpu_families

    frame = DevicePoller(inject(True), host=None).poll()
    power = next(f for f in gpu_families(frame, "node1") if f.name == "DCGM_FI_DEV_POWER_USAGE")
    assert [dict(lab) for lab, _ in power.samples] == [
        {"gpu": str(i), "UUID": "GPU-1", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
         "device": f"nvidia{i}", "modelName": "Fake H100", "Hostname": "node1",
         "simulated": "false"} for i in (0, 1)]
    frame = DevicePoller(inject(True, nvmlDeviceGetPciInfo=None), host=None).poll()
    power = next(f for f in gpu_families(frame, "node1") if f.name == "DCGM_FI_DEV_POWER_USAGE")
    assert [lab["pci_bus_id"] for lab, _ in power.samples] == ["", ""]


def test_the_energy_counter_is_read_at_most_every_energy_every_s(inject: Any) -> None:
    """The counter costs ~2.8 ms a call on an H200 (the power field ~2.5 µs): a tick
    within ENERGY_EVERY_S of the last counter reading asks for the power alone."""
    b = inject(True)
    first = b.sample(0, slow=False)
    calls = b.call_count
    second = b.sample(0, slow=False)
    assert first.energy_j == 5000.0 and second.energy_j is None
    assert second.power_w == 250.0 and b.call_count - calls == 3  # util, memory, power
    b._energy_due_ns[0] = 0  # due again
    assert b.sample(0, slow=False).energy_j == 5000.0
    assert b.sample(1, slow=False).energy_j == 5000.0  # each GPU on its own clock


def test_process_utilization_without_samples_is_none_and_backs_off(
        inject: Any, caplog: pytest.LogCaptureFixture) -> None:
    """NVML answers Not Found when no process has samples: that is "no samples", not
    a failure (nothing logged), and the query waits PROC_UTIL_BACKOFF_S."""
    class NVMLError_NotFound(NVMLError):
        pass

    asked = []

    def not_found(h: Any, since: int) -> Any:
        asked.append(since)
        raise NVMLError_NotFound("Not Found")

    b = inject(True, NVMLError_NotFound=NVMLError_NotFound,
               nvmlDeviceGetProcessUtilization=not_found)
    with caplog.at_level(logging.INFO, logger="dltop.telemetry.nvml"):
        s = b.sample(0, slow=True)
        b.sample(0, slow=True)
    assert s.processes is not None and s.processes[0].sm_util_pct is None
    assert len(asked) == 1
    assert not [r for r in caplog.records if "process_utilization" in r.getMessage()]
    b._proc_util_due_ns[0] = 0
    b.sample(0, slow=True)
    assert len(asked) == 2


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


def raising(exc: Exception) -> Any:
    def fn(*a: Any) -> Any:
        raise exc

    return fn


def lost_on(index: int, exc: Exception, value: Any) -> Any:
    def fn(h: Any, *a: Any) -> Any:
        if h == f"h{index}":
            raise exc
        return value

    return fn


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_lost_gpu_reads_na_and_is_logged_once_with_its_index(
        inject: Any, caplog: pytest.LogCaptureFixture) -> None:
    b = inject(True, nvmlDeviceGetHandleByIndex=lambda i: (
        raising(NVMLError_GpuIsLost("GPU is lost"))() if i == 1 else f"h{i}"))
    with caplog.at_level(logging.INFO, logger="dltop.telemetry.nvml"):
        s = b.sample(1, slow=True)
        b.sample(1, slow=True)
        st = b.static(1)
        good = b.sample(0, slow=True)
    assert (s.index, s.gpu_util_pct, s.power_w, s.temperature_c) == (1, None, None, None)
    assert (st.name, st.memory_total_bytes) == ("GPU", None)
    assert good.gpu_util_pct == 97.0  # the other GPU is unaffected
    [line] = warnings(caplog)
    assert "GPU 1" in line and "lost" in line


def test_unknown_error_on_every_field_is_one_line_per_gpu(
        inject: Any, caplog: pytest.LogCaptureFixture) -> None:
    unknown = NVMLError_Unknown("Unknown Error")
    b = inject(False, nvmlDeviceGetUtilizationRates=lost_on(1, unknown, types.SimpleNamespace(
        gpu=97, memory=40)), nvmlDeviceGetMemoryInfo=lost_on(1, unknown, types.SimpleNamespace(
            total=1, used=1)), nvmlDeviceGetPowerUsage=lost_on(1, unknown, 200_000))
    with caplog.at_level(logging.INFO, logger="dltop.telemetry.nvml"):
        s = b.sample(1, slow=False)
    assert (s.gpu_util_pct, s.mem_used_bytes, s.power_w) == (None, None, None)
    [line] = warnings(caplog)
    assert "GPU 1" in line and "Unknown Error" in line


def test_function_not_found_and_missing_functions_are_na_logged_once(
        inject: Any, caplog: pytest.LogCaptureFixture) -> None:
    b = inject(True, nvmlDeviceGetClockInfo=raising(NVMLError_FunctionNotFound("Not Found")),
               nvmlDeviceGetCurrentClocksEventReasons=None, NVML_TEMPERATURE_GPU=None)
    with caplog.at_level(logging.INFO, logger="dltop.telemetry.nvml"):
        for _ in range(3):
            s = b.sample(0, slow=True)
    assert (s.sm_clock_mhz, s.mem_clock_mhz, s.throttle_reasons, s.temperature_c) == (
        None, None, None, None)
    lines = warnings(caplog)
    # sm_clock, mem_clock, throttle_reasons (no function in this pynvml), temperature
    # (no constant): each once, however many ticks.
    assert len(lines) == 4 and all("lacks the function" in x for x in lines)
    assert s.gpu_util_pct == 97.0


def test_not_supported_is_na_without_a_warning(
        inject: Any, caplog: pytest.LogCaptureFixture) -> None:
    b = inject(False)
    with caplog.at_level(logging.INFO, logger="dltop.telemetry.nvml"):
        b.sample(0, slow=True)
        b.sample(0, slow=True)
    assert warnings(caplog) == []
    infos = [r.getMessage() for r in caplog.records]
    assert len(infos) == len(set(infos)) and any("temperature" in x for x in infos)


def test_a_malformed_field_value_falls_back_to_averaged_power(inject: Any) -> None:
    b = inject(True, nvmlDeviceGetFieldValues=lambda h, ids: [
        types.SimpleNamespace(nvmlReturn=0, valueType=1, value=types.SimpleNamespace()),
        types.SimpleNamespace(nvmlReturn=0, valueType="x", value=None)])
    s = b.sample(0, slow=False)
    assert (s.power_w, s.power_source) == (200.0, "average")
