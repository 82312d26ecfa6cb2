"""The user config file: which interpreter runs each framework, and the sites.

``$DLTOP_CONFIG``, else ``$XDG_CONFIG_HOME/dltop/config.toml`` (default
``~/.config/dltop/config.toml``)::

    [frameworks.tensorflow]
    python = "/opt/tf/bin/python"        # an interpreter that has tensorflow

    [frameworks.cntk]
    python = "/opt/cntk/venv/bin/python"
    ld_library_path = "/opt/cntk/lib"    # prepended for CNTK's children only

    [systems.cluster]                    # dltop run --system cluster (dltop.systems)
    partition = "gpu"

    [limits]
    max_jobs = 100000                    # jobs a campaign may hold (dltop.profiles.limits)

A missing file is an empty config. Errors name the file and the key.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop.catalog import FRAMEWORKS
from dltop.errors import UserError
from dltop.paths import config_dir

CONFIG_ENV = "DLTOP_CONFIG"
_KEYS = ("python", "ld_library_path")


@dataclass(frozen=True)
class FrameworkConfig:
    """One ``[frameworks.NAME]`` table."""

    python: str | None = None
    ld_library_path: str | None = None


def config_path() -> Path:
    """Where the config file is read from (it need not exist)."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return config_dir() / "config.toml"


TABLES = ("frameworks", "systems", "limits", "servers")


def read_config(path: Path) -> dict[str, Any] | None:
    """The config file's TOML (None when there is no file).

    Raises:
        UserError: the file cannot be read, is not TOML, or has a top-level table dltop
            does not know.
    """
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per level: ~500 nested arrays exhaust it
        raise UserError(f"{path}: arrays or tables nested too deeply to read") from None
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise UserError(f"{path}: unknown table or key {unknown[0]!r} (expected "
                        "[frameworks.NAME], [systems.NAME] or [limits])")
    return data


def load_frameworks(path: Path | None = None) -> dict[str, FrameworkConfig]:
    """The ``[frameworks.*]`` tables of the config file (empty when there is no file).

    Raises:
        UserError: the file is not TOML, or a table or key is not one dltop knows.
    """
    path = path or config_path()
    data = read_config(path)
    if data is None:
        return {}
    tables = data.get("frameworks", {})
    if not isinstance(tables, dict):
        raise UserError(f"{path}: frameworks: expected tables like [frameworks.cntk]")
    out = {}
    for name, table in tables.items():
        where = f"{path}: frameworks.{name}"
        if name not in FRAMEWORKS:
            raise UserError(f"{where}: unknown framework (expected one of "
                            f"{', '.join(FRAMEWORKS)})")
        if not isinstance(table, dict):
            raise UserError(f"{where}: expected a table with python = \"...\"")
        for key, value in table.items():
            if key not in _KEYS:
                raise UserError(f"{where}.{key}: unknown key (expected {', '.join(_KEYS)})")
            if not isinstance(value, str) or not value.strip():
                raise UserError(f"{where}.{key}: expected a non-empty string, got {value!r}")
        out[name] = FrameworkConfig(
            python=str(Path(table["python"]).expanduser()) if "python" in table else None,
            ld_library_path=table.get("ld_library_path"))
    return out
