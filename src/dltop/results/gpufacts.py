"""The GPUs' settings at the start of a run, as stored and as shown.

The engine reads them through :func:`dltop.telemetry.nvml.gpu_run_facts` as a GPU
run starts and keeps them in the run's ``environment.extra`` JSON under
:data:`GPU_FACTS_KEY`, one object per GPU with the fields of
:class:`~dltop.telemetry.values.GpuRunFacts` (units in their names). This module
turns that JSON into text for the run detail and the exports' environment
caption; standard library only, so exports start fast.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

GPU_FACTS_KEY = "gpus_at_start"
"""The key of ``environment.extra`` holding each GPU's facts at run start."""
NA = "n/a"


def extra_object(extra: str | None) -> Mapping[str, Any]:
    """A run's ``environment.extra`` JSON as an object; empty where the text is none or
    not a JSON object (read once where several of its keys are wanted)."""
    try:
        got = json.loads(extra or "{}")
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def extra_field(extra: str | None, key: str) -> Any:
    """``key``'s value in a run's ``environment.extra`` JSON; None where it has none or
    the text is not a JSON object."""
    return extra_object(extra).get(key)


def gpu_facts(extra: str | None) -> tuple[Mapping[str, Any], ...]:
    """The facts objects ``extra`` (``environment.extra`` JSON) holds, each with an
    integer ``index``; empty for text that is not such JSON."""
    found = extra_field(extra, GPU_FACTS_KEY)
    if not isinstance(found, list):
        return ()
    return tuple(f for f in found if isinstance(f, dict) and isinstance(f.get("index"), int))


def gpu_facts_texts(extra: str | None) -> tuple[tuple[int, str], ...]:
    """``(GPU index, one line)`` per GPU of ``extra``, e.g. ``SM 1980 MHz, memory 2619
    MHz, persistence on, power limit 700 W, ECC on, PCIe gen 5 x16 (max gen 5 x16),
    compute capability 9.0``; ``n/a`` where NVML did not say."""
    return tuple((int(f["index"]), f"{clocks_text(f)}, {settings_text(f)}")
                 for f in gpu_facts(extra))


def clocks_text(f: Mapping[str, Any]) -> str:
    """``SM 1980 MHz, memory 2619 MHz`` (the clocks as the run started)."""
    return f"SM {_val(f, 'sm_clock_mhz', '{} MHz')}, memory {_val(f, 'mem_clock_mhz', '{} MHz')}"


def settings_text(f: Mapping[str, Any]) -> str:
    """Everything but the clocks: what stays put from run to run on one GPU."""
    return (f"persistence {_onoff(f, 'persistence_mode')}, "
            f"power limit {_val(f, 'power_limit_w', '{:g} W')}, ECC {_onoff(f, 'ecc_enabled')}, "
            f"PCIe {_link(f, 'pcie_generation', 'pcie_width_lanes')} "
            f"(max {_link(f, 'pcie_max_generation', 'pcie_max_width_lanes')}), "
            f"compute capability {_val(f, 'compute_capability')}")


def caption_texts(extras: Sequence[str | None]) -> tuple[tuple[str, ...], str | None]:
    """For an exported set: its distinct GPU settings lines, and the range of clocks
    at start over its GPU runs (``SM 1410-1980 MHz, memory 2619 MHz``; None: none)."""
    facts = [f for e in extras for f in gpu_facts(e)]
    settings = tuple(dict.fromkeys(settings_text(f) for f in facts))
    if not facts:
        return settings, None
    return settings, (f"SM {_span(facts, 'sm_clock_mhz')}, "
                      f"memory {_span(facts, 'mem_clock_mhz')}")


def _span(facts: Sequence[Mapping[str, Any]], key: str) -> str:
    values = [v for f in facts if isinstance(v := f.get(key), int | float)]
    if not values:
        return NA
    lo, hi = min(values), max(values)
    return f"{lo:g} MHz" if lo == hi else f"{lo:g}-{hi:g} MHz"


def _val(f: Mapping[str, Any], key: str, fmt: str = "{}") -> str:
    v = f.get(key)
    if v is None:
        return NA
    try:
        return fmt.format(v)
    except (ValueError, TypeError):  # not the number the format expects
        return str(v)


def _onoff(f: Mapping[str, Any], key: str) -> str:
    v = f.get(key)
    return NA if v is None else ("on" if v else "off")


def _link(f: Mapping[str, Any], gen: str, width: str) -> str:
    if f.get(gen) is None and f.get(width) is None:
        return NA
    return f"gen {_val(f, gen)} x{_val(f, width)}"
