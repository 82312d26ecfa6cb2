"""Where dltop keeps things (XDG base directories) and search-path variables.

Standard library only, so any layer may import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or str(Path.home() / fallback))


def data_dir() -> Path:
    """``$XDG_DATA_HOME/dltop``, falling back to ``~/.local/share/dltop``."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "dltop"


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/dltop``, falling back to ``~/.config/dltop``."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "dltop"


def library_path_with(directory: str, env: Mapping[str, str]) -> str:
    """``LD_LIBRARY_PATH`` with ``directory`` first, ahead of the value in ``env``.

    Args:
        directory: the library directory to search first.
        env: the environment whose ``LD_LIBRARY_PATH`` (if any) follows it.
    """
    old = env.get("LD_LIBRARY_PATH")
    return directory + (os.pathsep + old if old else "")
