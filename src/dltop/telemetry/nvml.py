"""The only module that talks to NVML (``pynvml`` from the nvidia-ml-py package).

NVML is initialised lazily, once per process. When it cannot load (no NVIDIA
driver, no GPU) every query answers "no GPUs" and :func:`unavailable_reason`
says why, instead of raising.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"tried": False, "nvml": None, "reason": None}


def _nvml() -> Any | None:
    """The initialised pynvml module, or None (reason kept for unavailable_reason)."""
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            try:
                import pynvml  # noqa: TID251 - this module owns NVML

                pynvml.nvmlInit()
                _state["nvml"] = pynvml
            except ImportError as exc:
                _state["reason"] = f"nvidia-ml-py is not installed ({exc})"
            except Exception as exc:
                _state["reason"] = f"NVML not available: {exc}"
        return _state["nvml"]


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
