"""Sites: ``[systems.NAME]`` tables of the user config, chosen by ``dltop run --system NAME``.

A system is what a profile should not have to repeat for each cluster (docs/cluster.md)::

    [systems.jureca]
    partition = "dc-gpu"
    account = "proj123"
    gpus_per_node = 4
    cpus_per_gpu = 32
    setup = ["module load CUDA/12"]
    # container = "nvcr.io#nvidia/pytorch:24.01-py3"
    parallel = 4                       # runs in Slurm at once

    [systems.jureca.references]
    "gpt2-small/torch/bf16" = { tokens_per_s = [510000, -0.05, 0.10] }

Its keys are the ``[slurm]`` keys (:data:`dltop.profiles.slurm.KEYS`), ``executor``
(``slurm``, the default, or ``local``: a named workstation) and ``references``. The
system's keys are the defaults of the profile's ``[slurm]`` table (the profile's own
keys win), its executor the default ``executor`` of the profile's jobs, and its name is
stored in every job (``JobSpec.system``, identity).
"""

from __future__ import annotations

import re
from pathlib import Path

from dltop.config import config_path, read_config
from dltop.errors import UserError
from dltop.profiles import references, slurm
from dltop.profiles.site import System

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
EXECUTORS = ("slurm", "local")
KEYS = (*slurm.KEYS, "executor", "references")

CONFIG_LAYER = 0
"""The references' layer of a system's table (a profile's are above: they win)."""


def check_name(name: str) -> str:
    """``name`` when it can name a system (letters, digits, ``_.-``).

    Raises:
        UserError: it cannot.
    """
    if not NAME.match(name):
        raise UserError(f"--system {name!r}: expected a name of letters, digits, '_', '.' "
                        "or '-' (a [systems.NAME] table of the config file)")
    return name


def load_system(name: str, path: Path | None = None) -> System:
    """The ``[systems.NAME]`` table of the config file.

    Raises:
        UserError: no config file, no such system, or a key or value dltop does not know
            (naming the file and the key).
    """
    check_name(name)
    path = path or config_path()
    data = read_config(path)
    if data is None:
        raise UserError(f"--system {name}: there is no config file {path} (define "
                        f"[systems.{name}] there; docs/cluster.md)")
    tables = data.get("systems", {})
    if not isinstance(tables, dict):
        raise UserError(f"{path}: systems: expected tables like [systems.{name}]")
    if name not in tables:
        known = ", ".join(sorted(tables)) or "none"
        raise UserError(f"{path}: systems.{name}: no such system (defined: {known})")
    table = tables[name]
    where = f"{path}: systems.{name}"
    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table [systems.{name}]")

    def err(key: str, msg: str) -> UserError:
        # slurm.parse names its keys "slurm.KEY"; here they sit in the system's table.
        return UserError(f"{where}.{key.removeprefix('slurm.')}: {msg}")

    for key in table:
        if key not in KEYS:
            raise err(key, f"unknown key (valid here: {', '.join(KEYS)})")
    executor = table.get("executor", "slurm")
    if executor not in EXECUTORS:
        raise err("executor", f"expected one of {', '.join(EXECUTORS)}, got {executor!r}")
    own = {k: v for k, v in table.items() if k in slurm.KEYS}
    if own and executor != "slurm":
        raise err(sorted(own)[0], 'a Slurm key on a system with executor = "local"')
    slurm.parse(err, own)  # its values checked here, where the error names the config
    rules = references.parse_rules(err, "references", table.get("references", {}),
                                   CONFIG_LAYER)
    return System(name, where, executor, own, rules)
