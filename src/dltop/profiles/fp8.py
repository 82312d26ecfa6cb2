"""``precision = "fp8"``: where fp8 training can run, checked at load (docs/profiles.md).

fp8 is PyTorch training of the transformer models through torchao's float8 training
(``fp8_recipe``: ``tensorwise`` or ``rowwise`` scaling) on a GPU of compute capability
8.9 or later. What the profile alone rules out is refused here, naming the file and
the key: another framework (TensorFlow and CNTK have no fp8 training path in dltop;
JAX's was not built), a CPU device, a model other than the transformers, a mode other
than training, or ``fp8_recipe`` without fp8. The GPU's capability is the host's: the
preflight checks it (:func:`dltop.jobs.campaign.fp8_gpu_problem`), and a run that only
finds out then (a Slurm node, torchao missing) ends ``unsupported`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles.device import DeviceSpec

Err = Callable[[str, str], UserError]
Loc = Callable[[str], str]

FP8: Final = "fp8"
DEFAULT_RECIPE: Final = "tensorwise"
"""torchao's default float8 recipe: one dynamic scale per tensor."""
MIN_CAPABILITY: Final = (8, 9)
"""Compute capability of the first GPUs with fp8 tensor cores (Ada 8.9: L40S, L4, RTX
4090; Hopper 9.0: H100, H200)."""
WHERE: Final = "compute capability 8.9 or later (H100, H200, L40S)"


def job_settings(err: Err, loc: Loc, s: dict[str, Any], framework: str, model: str,
                 device: DeviceSpec) -> dict[str, Any]:
    """One job's settings with ``fp8_recipe`` filled in for fp8, checked against the job.

    Returns:
        ``s`` itself without fp8, else a copy whose ``fp8_recipe`` is set.

    Raises:
        UserError: fp8 where it cannot run, or ``fp8_recipe`` without fp8.
    """
    if s["precision"] != FP8:
        if s.get("fp8_recipe") is not None:
            raise err(loc("fp8_recipe"), f'fp8_recipe applies to precision = "fp8" only '
                      f"(precision is {s['precision']!r})")
        return s
    can = catalog.capabilities(framework)
    if FP8 not in can.precisions:
        why = can.no_fp8 or f"{framework} has no fp8 training path"
        raise err(loc("precision"), f'precision = "fp8" runs in PyTorch only (torchao '
                  f"float8 training); {why} (docs/profiles.md)")
    if device.kind != "gpu":
        raise err(loc("precision"), f'precision = "fp8" needs a GPU of {WHERE}; '
                  f"{device.label} has no fp8 matrix units")
    if model not in catalog.TRANSFORMER_MODELS:
        raise err(loc("precision"), f'precision = "fp8" applies to the transformer models '
                  f"({', '.join(catalog.TRANSFORMER_MODELS)}), not {model}: torchao "
                  "converts linear layers only, so an image model's convolutions would "
                  "stay in bf16 under an fp8 MFU")
    if s["mode"] != "train":
        raise err(loc("precision"), f'precision = "fp8" is for training (torchao float8 '
                  f"training); mode is {s['mode']!r}")
    out = dict(s)
    if out.get("fp8_recipe") is None:
        out["fp8_recipe"] = DEFAULT_RECIPE
    return out


def capability_problem(label: str, caps: list[tuple[int, int] | None], count: int) -> str | None:
    """Why a ``gpu:N`` fp8 job cannot run on GPUs of these compute capabilities, or None.

    A GPU whose capability NVML cannot tell counts as able (the run says if it is not).
    """
    able = [c for c in caps if c is None or c >= MIN_CAPABILITY]
    if len(able) >= count:
        return None
    found = ", ".join(sorted({f"{c[0]}.{c[1]}" for c in caps if c is not None}))
    return (f'{label} with precision = "fp8": fp8 training needs a GPU of {WHERE}; '
            f"this host's GPUs are compute capability {found} (use bf16 there)")
