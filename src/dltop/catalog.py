"""The closed vocabularies that profiles and runners agree on."""

from typing import Final

FRAMEWORKS: Final = ("torch", "tensorflow", "cntk", "command")
"""Framework names a profile may use. ``command`` runs the user's own program.

``torch`` and ``command`` have runners so far; ``tensorflow`` and ``cntk`` are
refused at preflight until theirs exist."""

MODELS: Final = ("fcn-s", "fcn-r", "alexnet-s", "alexnet-r", "resnet-50", "resnet-56", "lstm")
"""Benchmark models of docs/models.md, in the paper's order."""

PRECISIONS: Final = ("fp32", "tf32", "fp16", "bf16")
DATA_KINDS: Final = ("synthetic", "real")
BATCH_SCALINGS: Final = ("global", "per-device")

STATUSES: Final = (
    "ok",
    "oom",
    "unsupported",
    "diverged",
    "timeout",
    "crashed",
    "cancelled",
    "unsatisfiable",
)
"""Final statuses of a run. ``unsatisfiable``: the host lacks the devices the job asks for."""
